package api

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/trustplane/trustplane/certs"
)

// CCA-5 (docs/REDTEAM-cluster-ca.md): a cluster CA renewed with its own
// key (a new certificate, the same key and subject: how CAs are commonly
// extended) is rotated in and the old certificate finished. A client's
// connection verified before finish ends at the old certificate; its
// certificate is still issued by a trusted key, so it must keep its
// identity, as a new connection of the same client does.
func TestRedteamStillTrustedAfterSameKeyRenewal(t *testing.T) {
	old, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *old.Cert
	tmpl.SerialNumber = tmpl.SerialNumber.Add(tmpl.SerialNumber, tmpl.SerialNumber)
	tmpl.NotBefore = time.Now().Add(-time.Minute)
	tmpl.NotAfter = old.Cert.NotAfter.Add(365 * 24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, old.Cert.PublicKey, old.Key)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := old.Issue(certs.Request{CommonName: "alice", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(renewed)
	// A new connection verifies.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("a new connection under the renewed CA: %v", err)
	}
	s := &Server{cfg: &Config{ClientCAs: func() *x509.CertPool { return pool }}}
	if !s.stillTrusted([][]*x509.Certificate{{leaf, old.Cert}}) {
		t.Fatal("a connection verified under the CA's previous certificate loses its identity, though its key is still trusted")
	}
	// A CA whose key left the pool is refused.
	other, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	otherPEM, _, err := other.Issue(certs.Request{CommonName: "mallory", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(otherPEM)
	otherLeaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if s.stillTrusted([][]*x509.Certificate{{otherLeaf, other.Cert}}) {
		t.Fatal("a chain anchored at a CA not in the pool is still trusted")
	}
}
