package api

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/certs"
)

// chainOf is the chain a handshake verified for a client certificate of
// ca: the leaf, then ca.
func chainOf(t testing.TB, ca *certs.CA, user string) [][]*x509.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(certs.Request{CommonName: user, Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return [][]*x509.Certificate{{pair.Leaf, ca.Cert}}
}

// A client certificate authenticates only while its chain's anchor is a
// client CA of the moment: a connection verified before its CA left the
// pool (a rotation's finish) loses the identity it had.
func TestClientCertificateNeedsItsCAStill(t *testing.T) {
	old, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	next, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	pool := old.Pool()
	pool.AddCert(next.Cert)
	s := &Server{cfg: &Config{ClientCAs: func() *x509.CertPool { return pool }}}
	var got string
	h := s.withTLSAuthentication(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got = ""
		if u, ok := genericapirequest.UserFrom(r.Context()); ok {
			got = u.GetName()
		}
	}))
	serve := func(chains [][]*x509.Certificate) string {
		req := httptest.NewRequest(http.MethodGet, "/api", nil)
		req.TLS = &tls.ConnectionState{VerifiedChains: chains, PeerCertificates: []*x509.Certificate{chains[0][0]}}
		h.ServeHTTP(httptest.NewRecorder(), req)
		return got
	}
	oldChain, nextChain := chainOf(t, old, "old-admin"), chainOf(t, next, "next-admin")
	if serve(oldChain) != "old-admin" || serve(nextChain) != "next-admin" {
		t.Fatal("client certificates of both CAs of the pool do not authenticate")
	}
	pool = next.Pool() // finish: the old CA leaves
	if got := serve(oldChain); got != "" {
		t.Fatalf("a chain verified under the removed CA still authenticates as %q", got)
	}
	if serve(nextChain) != "next-admin" {
		t.Fatal("the remaining CA's certificate no longer authenticates")
	}
}

// BenchmarkStillTrusted is what each request with a client certificate
// pays for the check against the client CAs of the moment.
func BenchmarkStillTrusted(b *testing.B) {
	ca, err := certs.NewClusterCA()
	if err != nil {
		b.Fatal(err)
	}
	pool := ca.Pool()
	for range 3 {
		other, err := certs.NewClusterCA()
		if err != nil {
			b.Fatal(err)
		}
		pool.AddCert(other.Cert)
	}
	s := &Server{cfg: &Config{ClientCAs: func() *x509.CertPool { return pool }}}
	chain := chainOf(b, ca, "admin")
	b.ReportAllocs()
	for b.Loop() {
		if !s.stillTrusted(chain) {
			b.Fatal("not trusted")
		}
	}
}
