package certs

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
)

// CCA-1 (docs/REDTEAM-cluster-ca.md): a serving chain during a rotation
// carries the active cluster CA cross-signed by the other. Anyone may read
// it from a TLS handshake. Presented as an intermediate by a client, it
// must not let a client certificate of the CA it certifies verify under
// the CA that signed it: after finish (or an abort and finish) that would
// keep the dropped CA's client certificates, or any certificate a leaked
// key of it mints, authenticating for as long as the cross lives.
func TestRedteamCrossSignIsNoClientPath(t *testing.T) {
	oldCA, newCA := mustCA(t), mustCA(t)
	// Before promote the old CA is active and presented cross-signed by
	// the new one; after promote, the other way round.
	for _, tc := range []struct {
		name          string
		dropped, kept *CA
	}{
		{"finish after start (old by new)", oldCA, newCA},
		{"abort after promote, then finish (new by old)", newCA, oldCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cross, err := CrossSign(tc.dropped, tc.kept)
			if err != nil {
				t.Fatal(err)
			}
			certPEM, _, err := tc.dropped.Issue(Request{CommonName: "attacker", Organization: []string{"system:masters"}, Client: true})
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode(certPEM)
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			inter := x509.NewCertPool()
			inter.AddCert(cross)
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: tc.kept.Pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
				t.Fatal("a client certificate of the dropped CA verifies under the kept CA through the public cross-signed certificate")
			}
			// The cross still does its job: a serving certificate of the
			// dropped CA verifies under the kept one.
			srvPEM, _, err := tc.dropped.Issue(Request{CommonName: "apiserver", DNSNames: []string{"localhost"}, Server: true})
			if err != nil {
				t.Fatal(err)
			}
			block, _ = pem.Decode(srvPEM)
			srv, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Verify(x509.VerifyOptions{Roots: tc.kept.Pool(), Intermediates: inter, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Fatalf("the serving certificate no longer verifies through the cross: %v", err)
			}
		})
	}
}
