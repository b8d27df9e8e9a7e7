package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// CACertFile and CAKeyFile are the CA's file names inside its directory.
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"

	caCommonName     = "trustplane-ca"
	nodeCACommonName = "trustplane-node-ca"
	caDuration       = 10 * 365 * 24 * time.Hour

	// defaultDuration is a leaf certificate's lifetime when Request.Duration
	// is zero.
	defaultDuration = 365 * 24 * time.Hour

	// backdate is subtracted from NotBefore so that peers whose clocks run
	// slightly behind ours accept a certificate the moment it is issued.
	backdate = 5 * time.Minute
)

// CA is the cluster's certificate authority: its certificate and its
// signing key. A CA is safe for concurrent use; it is never modified after
// it is loaded.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert in PEM form, as clients want it in kubeconfigs and
	// trust bundles.
	CertPEM []byte
}

// caKind names one CA's files inside its directory and the common name a
// new one gets. The cluster CA and the node CA differ only in these.
type caKind struct {
	certFile, keyFile, commonName string
}

var (
	clusterCAKind = caKind{CACertFile, CAKeyFile, caCommonName}
	nodeCAKind    = caKind{NodeCACertFile, NodeCAKeyFile, nodeCACommonName}
)

// LoadOrCreateCA returns the cluster CA stored in dir, creating dir (0700)
// and a new self-signed CA when neither file exists. It exists for the
// single-node bootstrap path and for `trustplane certs init`; nodes of a
// multi-node cluster must share one CA and so should call LoadCA on a
// directory prepared by `trustplane certs init`.
//
// If only one of the two files exists it returns ErrCAIncomplete rather than
// creating a new CA, because a replacement CA would silently orphan every
// certificate the old one signed.
func LoadOrCreateCA(dir string) (*CA, error) { return loadOrCreate(dir, clusterCAKind) }

// LoadCA loads the cluster CA stored in dir. It never creates anything: it
// returns ErrCANotFound when both files are absent, ErrCAIncomplete when one
// is, and ErrInvalidCA when they do not form a usable CA.
func LoadCA(dir string) (*CA, error) { return load(dir, clusterCAKind) }

// LoadOrCreateNodeCA is LoadOrCreateCA for the node CA (node-ca.crt and
// node-ca.key in dir). The node CA is a second, separate authority, as
// kube's front-proxy CA is separate from its client CA: no signer ever
// uses it, so no API client can obtain a certificate that passes for a
// node.
func LoadOrCreateNodeCA(dir string) (*CA, error) { return loadOrCreate(dir, nodeCAKind) }

// LoadNodeCA is LoadCA for the node CA.
func LoadNodeCA(dir string) (*CA, error) { return load(dir, nodeCAKind) }

func loadOrCreate(dir string, kind caKind) (*CA, error) {
	certPath, keyPath, certOK, keyOK, err := caFiles(dir, kind)
	if err != nil {
		return nil, err
	}
	if certOK || keyOK {
		return load(dir, kind)
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: create CA directory %s: %w", dir, err)
	}
	ca, err := newCA(kind.commonName)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKeyPEM(ca.Key)
	if err != nil {
		return nil, err
	}
	// Key first: a crash between the two writes leaves a key without a
	// certificate, which load reports instead of overwriting.
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(certPath, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// caFiles names kind's files in dir and reports which exist.
func caFiles(dir string, kind caKind) (certPath, keyPath string, certOK, keyOK bool, err error) {
	certPath, keyPath = filepath.Join(dir, kind.certFile), filepath.Join(dir, kind.keyFile)
	if certOK, err = fileExists(certPath); err != nil {
		return "", "", false, false, err
	}
	if keyOK, err = fileExists(keyPath); err != nil {
		return "", "", false, false, err
	}
	return certPath, keyPath, certOK, keyOK, nil
}

func load(dir string, kind caKind) (*CA, error) {
	certPath, keyPath, certOK, keyOK, err := caFiles(dir, kind)
	if err != nil {
		return nil, err
	}
	switch {
	case !certOK && !keyOK:
		return nil, fmt.Errorf("%w in %s (%s)", ErrCANotFound, dir, kind.certFile)
	case !keyOK:
		return nil, fmt.Errorf("%w: %s exists but %s does not", ErrCAIncomplete, certPath, keyPath)
	case !certOK:
		return nil, fmt.Errorf("%w: %s exists but %s does not", ErrCAIncomplete, keyPath, certPath)
	}

	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("certs: read %s: %w", certPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("certs: read %s: %w", keyPath, err)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCA, certPath, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrInvalidCA, certPath)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidCA, keyPath, err)
	}
	if !keyMatches(cert, key) {
		return nil, fmt.Errorf("%w: %s does not belong to %s", ErrInvalidCA, keyPath, certPath)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(cert.Raw)}, nil
}

func newCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caDuration),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("certs: self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: parse new CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(der)}, nil
}

// Pool returns a new pool holding only the CA certificate, for RootCAs and
// ClientCAs. Each call returns a fresh pool so callers may add to it.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// randomSerial returns a random, positive 128-bit serial number. RFC 5280
// allows up to 20 octets; 128 bits of randomness makes collisions between
// independently issuing leaders negligible.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("certs: generate serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// ID identifies the cluster this CA belongs to: the hex SHA-256 of the CA
// certificate. Nodes compare it before gossiping, so that two clusters that
// happen to share a gossip key still never merge.
func (ca *CA) ID() string {
	sum := sha256.Sum256(ca.Cert.Raw)
	return hex.EncodeToString(sum[:])
}

// NewNodeCA makes a node CA in memory, for a rotation of the node CA that
// the cluster makes itself.
func NewNodeCA() (*CA, error) { return newCA(nodeCACommonName) }

// PEM is the CA as a PEM bundle: its certificate, then its private key.
// It is secret material.
func (ca *CA) PEM() ([]byte, error) {
	keyPEM, err := encodeKeyPEM(ca.Key)
	if err != nil {
		return nil, err
	}
	return append(append([]byte{}, ca.CertPEM...), keyPEM...), nil
}

// ParseCA reads a CA from a PEM bundle holding its certificate and its
// private key (PEM's form, or the files of `trustplane certs init`
// concatenated). The errors never quote the bundle.
func ParseCA(bundle []byte) (*CA, error) {
	var cert *x509.Certificate
	var key crypto.Signer
	rest := bundle
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		b := pem.EncodeToMemory(block)
		switch {
		case block.Type == "CERTIFICATE" && cert == nil:
			c, err := parseCertPEM(b)
			if err != nil {
				return nil, fmt.Errorf("%w: the certificate does not parse", ErrInvalidCA)
			}
			cert = c
		case strings.HasSuffix(block.Type, "PRIVATE KEY") && key == nil:
			k, err := parseKeyPEM(b)
			if err != nil {
				return nil, fmt.Errorf("%w: the private key does not parse", ErrInvalidCA)
			}
			key = k
		}
	}
	switch {
	case cert == nil || key == nil:
		return nil, fmt.Errorf("%w: a CA bundle needs a certificate and its private key in PEM", ErrInvalidCA)
	case !cert.IsCA || !cert.BasicConstraintsValid:
		return nil, fmt.Errorf("%w: the certificate is not a CA certificate", ErrInvalidCA)
	case !keyMatches(cert, key):
		return nil, fmt.Errorf("%w: the private key does not belong to the certificate", ErrInvalidCA)
	case time.Now().After(cert.NotAfter):
		return nil, fmt.Errorf("%w: the certificate expired on %s", ErrInvalidCA, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCertPEM(cert.Raw)}, nil
}

// CertID names a CA certificate without quoting it: the first 8 bytes of
// its SHA-256, in hex.
func CertID(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:8])
}

// Issued reports whether leaf is signed by ca.
func (ca *CA) Issued(leaf *x509.Certificate) bool {
	return leaf.CheckSignatureFrom(ca.Cert) == nil
}

// Covers reports whether leaf would serve r now: issued by ca, valid
// beyond the renewal margin, with r's names and usage (EnsurePair's test).
func (ca *CA) Covers(leaf *x509.Certificate, r Request) bool { return ca.covers(leaf, r, time.Now()) }

// SameKey reports whether a and b certify the same public key: a CA
// certificate re-issued with another serial or validity is still that CA.
func SameKey(a, b *x509.Certificate) bool {
	return bytes.Equal(a.RawSubjectPublicKeyInfo, b.RawSubjectPublicKeyInfo)
}
