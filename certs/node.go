package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
)

// Node identity. A node certificate is issued by the node CA, carries
// NodeOrganization and the common name NodeUserPrefix+<node name>. Only
// such certificates may speak Raft, call the internal RPC, send X-Remote-*
// identity headers, or answer a forwarded write as the leader.
const (
	// NodeCACertFile and NodeCAKeyFile are the node CA's file names, beside
	// the cluster CA's in the CA directory.
	NodeCACertFile = "node-ca.crt"
	NodeCAKeyFile  = "node-ca.key"

	// NodeOrganization is the organisation of every node certificate.
	NodeOrganization = "system:trustplane-nodes"
	// NodeUserPrefix starts the common name of every node certificate.
	NodeUserPrefix = "system:trustplane-node:"

	// NodeServerName is the TLS server name a node asks for when it calls
	// another node's API. The API then presents its node certificate
	// (which holds this DNS name) instead of its serving certificate, so
	// the caller can check it is talking to a node and not to any holder
	// of a certificate from the cluster CA.
	NodeServerName = "node.trustplane.internal"
)

// IsNodeSubject reports whether a certificate subject with this common
// name and these organisations would claim a node identity. Admission
// refuses such subjects in every CSR, whatever the signer, so that no
// certificate from any API signer even looks like a node's.
func IsNodeSubject(commonName string, organizations []string) bool {
	return strings.HasPrefix(commonName, NodeUserPrefix) || slices.Contains(organizations, NodeOrganization)
}

// NodeRequest is the request for a node's certificate: client and server
// usage (the same certificate dials and accepts Raft), the node's name and
// its advertised hosts as SANs, and NodeServerName for API-to-API calls.
func NodeRequest(nodeName string, hosts ...string) Request {
	r := Request{
		CommonName: NodeUserPrefix + nodeName, Organization: []string{NodeOrganization},
		DNSNames: []string{"localhost", NodeServerName}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		Client: true, Server: true,
	}
	for _, h := range append([]string{nodeName}, hosts...) {
		r.AddHost(h)
	}
	return r
}

// AddHost adds h as an IP or DNS SAN unless it is empty, unspecified or
// already present.
func (r *Request) AddHost(h string) {
	if h == "" {
		return
	}
	if ip := net.ParseIP(h); ip != nil {
		if ip.IsUnspecified() || slices.ContainsFunc(r.IPAddresses, ip.Equal) {
			return
		}
		r.IPAddresses = append(r.IPAddresses, ip)
		return
	}
	if !slices.Contains(r.DNSNames, h) {
		r.DNSNames = append(r.DNSNames, h)
	}
}

// NodeVerifier is the one place that decides whether a peer is a node, and
// which. It trusts the node CAs only (one, or two while the node CA
// rotates): a certificate from the cluster CA or any signer's CA is never
// a node's, whatever its subject says. The trusted CAs change live
// (SetRoots); every handshake verifies against those of its moment.
type NodeVerifier struct {
	trust *Roots
}

// NewNodeVerifier trusts nodeCA.
func NewNodeVerifier(nodeCA *CA) *NodeVerifier {
	return &NodeVerifier{trust: NewRoots("node-cas", nodeCA.Cert)}
}

// SetRoots makes roots the node CAs trusted from now on, by every
// handshake that starts after it; established connections keep going. An
// empty set is ignored: a node always trusts some node CA.
func (v *NodeVerifier) SetRoots(roots []*x509.Certificate) { v.trust.SetRoots(roots) }

// Roots are the node CAs trusted now.
func (v *NodeVerifier) Roots() []*x509.Certificate { return v.trust.Roots() }

// Pool is a fresh pool of the node CAs trusted now.
func (v *NodeVerifier) Pool() *x509.CertPool { return v.trust.Pool() }

// Trust is the node CAs as a live CA bundle (dynamiccertificates), for
// the API's client CAs.
func (v *NodeVerifier) Trust() *Roots { return v.trust }

// NodeName returns the node name that verified chains prove. chains are
// what crypto/tls verified (ConnectionState.VerifiedChains); one of them
// must end at a trusted node CA itself, so a certificate the TLS layer
// verified against a wider pool (the API's client CAs) counts only when it
// really chains to a node CA. The leaf must carry NodeOrganization and a
// NodeUserPrefix common name.
func (v *NodeVerifier) NodeName(chains [][]*x509.Certificate) (string, error) {
	roots := v.trust.current().certs
	for _, chain := range chains {
		if len(chain) < 2 || !slices.ContainsFunc(roots, chain[len(chain)-1].Equal) {
			continue
		}
		leaf := chain[0]
		name, ok := strings.CutPrefix(leaf.Subject.CommonName, NodeUserPrefix)
		if !ok || name == "" || !slices.Contains(leaf.Subject.Organization, NodeOrganization) {
			return "", fmt.Errorf("%w: %q is issued by the node CA but is not a node identity", ErrNotANode, leaf.Subject.CommonName)
		}
		return name, nil
	}
	if len(chains) == 0 || len(chains[0]) == 0 {
		return "", fmt.Errorf("%w: no verified certificate", ErrNotANode)
	}
	return "", fmt.Errorf("%w: %q is not issued by the node CA", ErrNotANode, chains[0][0].Subject.CommonName)
}

// PeerNode verifies the certificates the peer of a node-to-node connection
// presented against the node CAs trusted now, and names the node they
// prove. A node certificate serves both ends (client and server usage,
// NodeServerName), so both ends check the same.
func (v *NodeVerifier) PeerNode(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: no certificate", ErrNotANode)
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: v.trust.current().pool, Intermediates: inter, DNSName: NodeServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotANode, err)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return "", fmt.Errorf("%w: %q has no client usage", ErrNotANode, leaf.Subject.CommonName)
	}
	return v.NodeName(chains)
}

// ConnNodeName names the node at the other end of conn, a TLS connection
// (a *tls.Conn, or one that wraps it) whose handshake is complete
// (cluster.Config.PeerName).
func (v *NodeVerifier) ConnNodeName(conn net.Conn) (string, error) {
	tc, ok := conn.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return "", fmt.Errorf("%w: %T is not a TLS connection", ErrNotANode, conn)
	}
	return v.PeerNode(tc.ConnectionState())
}

// NodeCert is a node's own certificate, replaced live when the node CA
// rotates (Set); every handshake presents the one of its moment.
type NodeCert struct {
	p atomic.Pointer[tls.Certificate]
}

// NewNodeCert holds cert.
func NewNodeCert(cert tls.Certificate) *NodeCert {
	c := &NodeCert{}
	c.Set(cert)
	return c
}

// Get is the certificate now.
func (c *NodeCert) Get() *tls.Certificate { return c.p.Load() }

// Set replaces the certificate for the handshakes that follow.
func (c *NodeCert) Set(cert tls.Certificate) { c.p.Store(&cert) }

// HoldsCert reports whether the PEM bundle pemBytes contains cert, or a
// certificate of cert's key (cert re-issued with another serial or
// validity: still the same CA). It lets start-up refuse a signer
// configured with a node CA.
func HoldsCert(pemBytes []byte, cert *x509.Certificate) bool {
	for {
		var block *pem.Block
		block, pemBytes = pem.Decode(pemBytes)
		if block == nil {
			return false
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && SameKey(c, cert) {
			return true
		}
	}
}

// VerifyConnection is a tls.Config.VerifyConnection hook for node-to-node
// TLS, on both sides: the peer must present a node certificate that
// verifies against the node CAs trusted now.
func (v *NodeVerifier) VerifyConnection(cs tls.ConnectionState) error {
	_, err := v.PeerNode(cs)
	return err
}

// ClientTLS is the configuration a node dials other nodes with (Raft, the
// internal RPC and forwarded API requests): it presents cert's certificate
// of the moment, and accepts only a node certificate from a node CA
// trusted at the moment of the handshake. crypto/tls checks chains against
// a pool fixed in the configuration, so the chain is checked in
// VerifyConnection instead, against the live trust.
func (v *NodeVerifier) ClientTLS(cert *NodeCert) *tls.Config {
	return &tls.Config{
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.Get(), nil },
		ServerName:           NodeServerName,
		MinVersion:           tls.VersionTLS13,
		InsecureSkipVerify:   true, // verified by VerifyConnection, never skipped
		VerifyConnection:     v.VerifyConnection,
	}
}

// PeerTLS is the configuration of the Raft listener and its dialer: mutual
// TLS where each side presents its certificate of the moment and accepts
// only a node certificate, verified against the live trust.
func (v *NodeVerifier) PeerTLS(cert *NodeCert) *tls.Config {
	c := v.ClientTLS(cert)
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Get(), nil }
	c.ClientAuth = tls.RequireAnyClientCert // verified by VerifyConnection
	return c
}
