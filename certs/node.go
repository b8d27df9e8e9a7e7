package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
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
// which. It trusts the node CA only: a certificate from the cluster CA or
// any signer's CA is never a node's, whatever its subject says.
type NodeVerifier struct {
	root *x509.Certificate
	pool *x509.CertPool
}

// NewNodeVerifier trusts nodeCA.
func NewNodeVerifier(nodeCA *CA) *NodeVerifier {
	return &NodeVerifier{root: nodeCA.Cert, pool: nodeCA.Pool()}
}

// Pool is a fresh pool holding only the node CA, for the RootCAs and
// ClientCAs of node-to-node TLS.
func (v *NodeVerifier) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(v.root)
	return p
}

// Root is the node CA certificate.
func (v *NodeVerifier) Root() *x509.Certificate { return v.root }

// NodeName returns the node name that verified chains prove. chains are
// what crypto/tls verified (ConnectionState.VerifiedChains); one of them
// must end at the node CA itself, so a certificate the TLS layer verified
// against a wider pool (the API's client CAs) counts only when it really
// chains to the node CA. The leaf must carry NodeOrganization and a
// NodeUserPrefix common name.
func (v *NodeVerifier) NodeName(chains [][]*x509.Certificate) (string, error) {
	for _, chain := range chains {
		if len(chain) < 2 || !chain[len(chain)-1].Equal(v.root) {
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

// ConnNodeName names the node at the other end of conn, a *tls.Conn whose
// handshake is complete (cluster.Config.PeerName).
func (v *NodeVerifier) ConnNodeName(conn net.Conn) (string, error) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return "", fmt.Errorf("%w: %T is not a TLS connection", ErrNotANode, conn)
	}
	return v.NodeName(tc.ConnectionState().VerifiedChains)
}

// HoldsCert reports whether the PEM bundle pemBytes contains cert. It lets
// start-up refuse a signer configured with the node CA.
func HoldsCert(pemBytes []byte, cert *x509.Certificate) bool {
	for {
		var block *pem.Block
		block, pemBytes = pem.Decode(pemBytes)
		if block == nil {
			return false
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && c.Equal(cert) {
			return true
		}
	}
}

// VerifyConnection is a tls.Config.VerifyConnection hook for node-to-node
// TLS, on both sides: the peer must present a node certificate. It runs
// after crypto/tls has verified the chain, so VerifiedChains is set
// whenever the peer sent a certificate that verified.
func (v *NodeVerifier) VerifyConnection(cs tls.ConnectionState) error {
	_, err := v.NodeName(cs.VerifiedChains)
	return err
}

// ClientTLS is the configuration a node dials other nodes with (Raft, the
// internal RPC and forwarded API requests): it presents cert, trusts only
// the node CA and accepts only a node certificate in answer.
func (v *NodeVerifier) ClientTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates:     []tls.Certificate{cert},
		RootCAs:          v.Pool(),
		ServerName:       NodeServerName,
		MinVersion:       tls.VersionTLS13,
		VerifyConnection: v.VerifyConnection,
	}
}

// PeerTLS is the configuration of the Raft listener and its dialer: mutual
// TLS where each side presents cert and accepts only a node certificate.
func (v *NodeVerifier) PeerTLS(cert tls.Certificate) *tls.Config {
	c := v.ClientTLS(cert)
	c.ClientCAs = v.Pool()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	return c
}
