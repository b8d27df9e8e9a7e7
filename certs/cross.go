package certs

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// NewClusterCA makes a cluster CA in memory, for a rotation of the cluster
// CA that the cluster makes itself. Its common name carries the moment it
// was made, so that two generations of the cluster CA never share a
// subject and a chain names which one it runs through.
func NewClusterCA() (*CA, error) {
	return newCA(caCommonName + "-" + strconv.FormatInt(time.Now().Unix(), 10))
}

// NewSignerCA makes the CA of a CSR signer (short: its name after
// kubernetes.io/) in memory, for a rotation that the cluster makes itself.
func NewSignerCA(short string) (*CA, error) {
	return newCA("trustplane-" + short + "-ca-" + strconv.FormatInt(time.Now().Unix(), 10))
}

// CrossSign issues subject's CA certificate again, signed by by: the same
// subject, key and key identifier, so that a chain ending at subject also
// ends at by. A certificate issued by subject, presented with this one,
// verifies for a client that trusts either CA, which is what lets a
// serving certificate move to a new CA before every client has it. It
// lives no longer than either CA.
//
// It is constrained to server authentication (ExtKeyUsage), which Go's and
// every other verifier applies to the whole chain: anyone can read it from
// a TLS handshake, and as an intermediate of a client's chain it would let
// a client certificate of subject authenticate wherever by is trusted,
// after subject was rotated out (finish) or aborted, for as long as the
// cross lives (docs/REDTEAM-cluster-ca.md, CCA-1).
func CrossSign(subject, by *CA) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject.Cert.Subject,
		NotBefore:             time.Now().Add(-backdate),
		NotAfter:              subject.Cert.NotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           crossUsage,
		SubjectKeyId:          subject.Cert.SubjectKeyId,
	}
	if by.Cert.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = by.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, by.Cert, subject.Cert.PublicKey, by.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: cross-sign CA %s by %s: %w", CertID(subject.Cert), CertID(by.Cert), err)
	}
	return x509.ParseCertificate(der)
}

// crossUsage is the only extended key usage of a cross-signed CA
// certificate: it exists so that clients verify servers (CrossSign).
var crossUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}

// IsCrossOf reports whether c is subject's CA certificate issued by by,
// for server authentication only (CrossSign's output): a cross without
// that constraint is not one, so a node presenting one issues it again.
func IsCrossOf(c *x509.Certificate, subject, by *x509.Certificate) bool {
	return c.IsCA && slices.Equal(c.ExtKeyUsage, crossUsage) && SameKey(c, subject) && c.CheckSignatureFrom(by) == nil
}

// Roots is a set of trusted CA certificates that changes live (SetRoots),
// such as the cluster CAs while the cluster CA rotates: every reader sees
// the set of its moment. It is a dynamiccertificates.CAContentProvider,
// kube's live CA bundle: listeners (a union of bundles, a
// ClusterTrustBundle publisher) are told of each change.
type Roots struct {
	name string
	set  atomic.Pointer[rootSet]

	mu        sync.Mutex
	listeners []dynamiccertificates.Listener
}

// rootSet is one value of a Roots, with the forms its readers want, made
// once per change.
type rootSet struct {
	certs []*x509.Certificate
	pool  *x509.CertPool
	pem   []byte
}

var _ dynamiccertificates.CAContentProvider = (*Roots)(nil)

// NewRoots trusts roots; name names the bundle (dynamiccertificates).
func NewRoots(name string, roots ...*x509.Certificate) *Roots {
	r := &Roots{name: name}
	r.SetRoots(roots)
	return r
}

// SetRoots replaces the set and tells the listeners; an empty set is
// ignored, as a node always trusts some CA.
func (r *Roots) SetRoots(roots []*x509.Certificate) {
	if len(roots) == 0 {
		return
	}
	set := &rootSet{certs: slices.Clone(roots), pool: x509.NewCertPool()}
	for _, c := range roots {
		set.pool.AddCert(c)
		set.pem = append(set.pem, encodeCertPEM(c.Raw)...)
	}
	r.set.Store(set)
	r.mu.Lock()
	listeners := slices.Clone(r.listeners)
	r.mu.Unlock()
	for _, l := range listeners {
		l.Enqueue()
	}
}

func (r *Roots) current() *rootSet { return r.set.Load() }

// Roots are the CAs trusted now.
func (r *Roots) Roots() []*x509.Certificate { return slices.Clone(r.current().certs) }

// Pool is a fresh pool of the CAs trusted now.
func (r *Roots) Pool() *x509.CertPool { return r.current().pool.Clone() }

// PEM is the CAs trusted now as a PEM bundle, as kube-root-ca.crt and
// kubeconfigs carry them.
func (r *Roots) PEM() []byte { return slices.Clone(r.current().pem) }

// Name names the bundle (dynamiccertificates.CAContentProvider).
func (r *Roots) Name() string { return r.name }

// CurrentCABundleContent is PEM (dynamiccertificates.CAContentProvider).
func (r *Roots) CurrentCABundleContent() []byte { return r.PEM() }

// VerifyOptions verifies against the CAs trusted now
// (dynamiccertificates.CAContentProvider); the pool is shared, read only.
func (r *Roots) VerifyOptions() (x509.VerifyOptions, bool) {
	return x509.VerifyOptions{Roots: r.current().pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
}

// AddListener tells l of every later change
// (dynamiccertificates.Notifier).
func (r *Roots) AddListener(l dynamiccertificates.Listener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listeners = append(r.listeners, l)
}

// VerifyServer is a tls.Config.VerifyConnection hook for a client that
// trusts the server certificates of a live set of CAs (crypto/tls checks
// against a pool fixed in the configuration, so a client whose trust
// changes checks here instead, with InsecureSkipVerify set): the chain the
// server presented must verify, for the name dialled, against roots() of
// the moment of the handshake.
func VerifyServer(roots func() *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("certs: the server presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots:         roots(),
			Intermediates: inter,
			DNSName:       cs.ServerName,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		return err
	}
}

// NewLoopbackCA makes the CA of one process's loopback clients, in memory
// only: as kube-apiserver's loopback credentials, it exists for as long
// as the process, is trusted by that process alone, and never leaves it.
func NewLoopbackCA() (*CA, error) { return newCA("trustplane-loopback") }

// WriteFiles writes the CA to certFile and keyFile (the key 0600, first,
// each file atomically), as a file-reading signer wants it.
func (ca *CA) WriteFiles(certFile, keyFile string) error {
	keyPEM, err := encodeKeyPEM(ca.Key)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(certFile, ca.CertPEM, 0o644)
}
