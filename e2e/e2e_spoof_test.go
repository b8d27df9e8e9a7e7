package e2e_test

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/trustplane/trustplane/certs"
)

// TestRemoteIdentityHeadersCannotBeSpoofed: X-Remote-* headers carry a
// forwarded caller's identity between nodes and are trusted only from node
// certificates. A client with an ordinary certificate from the cluster CA
// that claims system:masters in them stays itself: the profiling endpoint,
// open to system:masters only, refuses it.
func TestRemoteIdentityHeadersCannotBeSpoofed(t *testing.T) {
	n := startNode(t)
	ca, err := certs.LoadCA(n.caDirPath())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(certs.Request{CommonName: "mallory", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: n.caPool(), Certificates: []tls.Certificate{pair}},
	}}
	tests := []struct {
		name    string
		headers map[string]string
	}{
		{"no identity headers", nil},
		{"claiming system:masters", map[string]string{"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}},
		{"claiming a node identity", map[string]string{"X-Remote-User": "system:trustplane-node:n1", "X-Remote-Group": "system:trustplane-nodes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, n.url()+"/debug/pprof/", nil)
			for k, v := range tt.headers {
				req.Header.Add(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("mallory with %v got %s, want 403 Forbidden", tt.headers, resp.Status)
			}
		})
	}
	// The admin (system:masters by certificate) is let in, so the 403s
	// above are about identity, not a closed endpoint.
	resp, err := n.httpClient().Get(n.url() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin got %s from /debug/pprof/, want 200", resp.Status)
	}
}
