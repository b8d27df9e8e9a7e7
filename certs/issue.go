package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// renewBefore is how long before expiry EnsurePair stops reusing a pair, so
// a certificate is replaced at a restart well before peers would reject it.
const renewBefore = 24 * time.Hour

// Request describes a leaf certificate for Issue and EnsurePair.
type Request struct {
	CommonName   string
	Organization []string // Kubernetes groups for client certificates
	DNSNames     []string
	IPAddresses  []net.IP
	// Client and Server select the extended key usages client auth and
	// server auth. A node's raft certificate needs both, because the same
	// certificate is presented when dialling and when accepting.
	Client, Server bool
	// Duration is the certificate's lifetime; zero means one year. The
	// lifetime is cut short at the CA's own expiry.
	Duration time.Duration
}

func (r Request) validate() error {
	if r.CommonName == "" && len(r.DNSNames) == 0 && len(r.IPAddresses) == 0 {
		return fmt.Errorf("%w: no common name and no subject alternative names", ErrInvalidRequest)
	}
	if !r.Client && !r.Server {
		return fmt.Errorf("%w: neither client nor server usage requested", ErrInvalidRequest)
	}
	if r.Duration < 0 {
		return fmt.Errorf("%w: negative duration %s", ErrInvalidRequest, r.Duration)
	}
	return nil
}

func (r Request) extKeyUsage() []x509.ExtKeyUsage {
	var u []x509.ExtKeyUsage
	if r.Client {
		u = append(u, x509.ExtKeyUsageClientAuth)
	}
	if r.Server {
		u = append(u, x509.ExtKeyUsageServerAuth)
	}
	return u
}

// Issue creates a new key pair and a certificate for it signed by ca. Each
// call makes a fresh key; nothing is written to disk (see EnsurePair).
func (ca *CA) Issue(r Request) (certPEM, keyPEM []byte, err error) {
	if err := r.validate(); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	d := r.Duration
	if d == 0 {
		d = defaultDuration
	}
	now := time.Now()
	notAfter := now.Add(d)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   r.CommonName,
			Organization: slices.Clone(r.Organization),
		},
		DNSNames:              slices.Clone(r.DNSNames),
		IPAddresses:           slices.Clone(r.IPAddresses),
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           r.extKeyUsage(),
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: sign certificate for %q: %w", r.CommonName, err)
	}
	keyPEM, err = encodeKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCertPEM(der), keyPEM, nil
}

// EnsurePair returns the key pair at certFile and keyFile if it is still
// good for r, and otherwise issues a new one and writes it there. "Good"
// means: both files parse and belong together, the certificate chains to
// ca, it does not expire within 24 hours, its common name and organizations
// equal r's, and its DNS names, IP addresses and key usages include r's.
// Reuse keeps restarts from churning certificates; the checks make a
// changed address, a replaced CA or a lost file heal on the next start.
//
// Organizations must match exactly rather than merely include r's, because
// for a client certificate they are group memberships: a leftover extra
// group would be extra privilege.
//
// The key is written with mode 0600 and before the certificate, each file
// atomically; the directory is created (0700) if needed.
func (ca *CA) EnsurePair(certFile, keyFile string, r Request) (tls.Certificate, error) {
	if err := r.validate(); err != nil {
		return tls.Certificate{}, err
	}
	if pair, ok := ca.reusablePair(certFile, keyFile, r); ok {
		return pair, nil
	}
	certPEM, keyPEM, err := ca.Issue(r)
	if err != nil {
		return tls.Certificate{}, err
	}
	for _, f := range []string{keyFile, certFile} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return tls.Certificate{}, fmt.Errorf("certs: create directory for %s: %w", f, err)
		}
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeFileAtomic(certFile, certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, errors.New("certs: newly issued pair does not load")
	}
	return pair, nil
}

// reusablePair loads the pair on disk and reports whether it satisfies r.
// Any problem (missing, unparsable, mismatched, stale) means "not reusable";
// the reason does not matter because the answer is always to reissue.
func (ca *CA) reusablePair(certFile, keyFile string, r Request) (tls.Certificate, bool) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, false
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, false
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, false
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, false
		}
		pair.Leaf = leaf
	}
	if !ca.covers(leaf, r, time.Now()) {
		return tls.Certificate{}, false
	}
	return pair, true
}

// covers reports whether leaf is signed by ca, valid until at least
// now+renewBefore, and satisfies r.
func (ca *CA) covers(leaf *x509.Certificate, r Request, now time.Time) bool {
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:       ca.Pool(),
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return false
	}
	if leaf.NotAfter.Before(now.Add(renewBefore)) {
		return false
	}
	if leaf.Subject.CommonName != r.CommonName {
		return false
	}
	if !sameSet(leaf.Subject.Organization, r.Organization) {
		return false
	}
	for _, name := range r.DNSNames {
		if !slices.Contains(leaf.DNSNames, name) {
			return false
		}
	}
	for _, ip := range r.IPAddresses {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, u := range r.extKeyUsage() {
		if !slices.Contains(leaf.ExtKeyUsage, u) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
