package api

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/trustplane/trustplane/certs"
)

// TestForwarderTrustsOnlyANodeAsLeader: a follower hands a write and its
// caller's identity only to an API that proves it is a node. A server with
// a certificate from the cluster CA, even with the node subject and the
// node server name (what an approved CSR could produce), never sees the
// request.
func TestForwarderTrustsOnlyANodeAsLeader(t *testing.T) {
	clusterCA, err := certs.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodeCA, err := certs.LoadOrCreateNodeCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes := certs.NewNodeVerifier(nodeCA)
	pair := func(ca *certs.CA, name string) tls.Certificate {
		certPEM, keyPEM, err := ca.Issue(certs.NodeRequest(name))
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	follower := pair(nodeCA, "follower")
	tests := []struct {
		name     string
		leader   tls.Certificate
		wantSeen bool
	}{
		{"a node certificate of the node CA", pair(nodeCA, "leader"), true},
		{"a node subject from the cluster CA", pair(clusterCA, "leader"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen, from atomic.Value
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Store(r.Header.Get(headerRemoteUser))
				host, _, _ := net.SplitHostPort(r.RemoteAddr)
				from.Store(host)
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{tt.leader}}
			srv.StartTLS()
			defer srv.Close()

			// The follower's API listens on its own loopback IP: the
			// forwarded request must come from it.
			f := newForwarder(&ForwardConfig{TLS: nodes.ClientTLS(follower), WaitForLeader: time.Second}, "127.0.0.14:6443")
			req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces", nil)
			resp, err := f.send(req, srv.Listener.Addr().String(), []byte("{}"), &user.DefaultInfo{Name: "alice"})
			if resp != nil {
				resp.Body.Close()
			}
			got, _ := seen.Load().(string)
			if tt.wantSeen {
				if err != nil || got != "alice" {
					t.Fatalf("send = %v; leader saw user %q, want alice", err, got)
				}
				if src, _ := from.Load().(string); src != "127.0.0.14" {
					t.Fatalf("the forwarded request came from %q, want the follower's listen IP 127.0.0.14", src)
				}
				return
			}
			if err == nil || got != "" {
				t.Fatalf("send to a non-node = %v; it saw user %q, want a refused handshake and nothing seen", err, got)
			}
			if !notSent(err) {
				t.Fatalf("a refused leader certificate must count as not sent (the write can go elsewhere): %v", err)
			}
		})
	}
}
