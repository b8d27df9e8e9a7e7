package api

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

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
	pair := func(ca *certs.CA, name string) tls.Certificate { return nodePair(t, ca, name) }
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
			f := newForwarder(&ForwardConfig{TLS: nodes.ClientTLS(certs.NewNodeCert(follower)), WaitForLeader: time.Second}, "127.0.0.14:6443")
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

// nodePair is a node certificate for name issued by ca.
func nodePair(t *testing.T, ca *certs.CA, name string) tls.Certificate {
	t.Helper()
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

// fakeLeadership is a Leadership whose leader the test moves.
type fakeLeadership struct{ addr atomic.Value }

func (l *fakeLeadership) IsLeader() bool { return false }
func (l *fakeLeadership) LeaderAPIAddr() (string, error) {
	a, _ := l.addr.Load().(string)
	return a, nil
}

// TestForwardedWriteEndsWhenLeadershipMoves: a leader that stops answering
// without closing the connection (a partition) is replaced within about a
// second; the forwarded write must then end with a 504 that says it may
// have been applied (no Retry-After), not hang until the client gives up.
func TestForwardedWriteEndsWhenLeadershipMoves(t *testing.T) {
	nodeCA, err := certs.LoadOrCreateNodeCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes := certs.NewNodeVerifier(nodeCA)
	pair := func(name string) tls.Certificate { return nodePair(t, nodeCA, name) }
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	silent := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release // never answers while the test runs
	}))
	silent.TLS = &tls.Config{Certificates: []tls.Certificate{pair("old-leader")}}
	silent.StartTLS()
	defer silent.Close()
	defer close(release) // before Close, which waits for the handler

	lead := &fakeLeadership{}
	lead.addr.Store(silent.Listener.Addr().String())
	s := testServer(t)
	s.cfg.Forward = &ForwardConfig{TLS: nodes.ClientTLS(certs.NewNodeCert(pair("follower"))), Leadership: lead, WaitForLeader: 5 * time.Second}
	h := s.withForwarding(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a follower served a write itself")
	}))
	req := aliceCreatesConfigMap()
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(rec, req); close(done) }()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the write never reached the old leader")
	}
	lead.addr.Store("127.0.0.1:1") // a new leader is known
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the forwarded write still hangs after leadership moved")
	}
	if rec.Code != http.StatusGatewayTimeout || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("got %d Retry-After %q: %s; want 504 without Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if !strings.Contains(rec.Body.String(), "may or may not have been applied") {
		t.Fatalf("the 504 does not say the outcome is unknown: %s", rec.Body)
	}
}

// A forwarder opens new connections once the certificate it presents
// changed (a node CA rotation), and keeps its connections otherwise.
func TestForwarderRenewsConnectionsWithItsCredentials(t *testing.T) {
	cred := 1
	f := newForwarder(&ForwardConfig{TLS: &tls.Config{}, WaitForLeader: time.Second, Credentials: func() any { return cred }}, "127.0.0.1:0")
	first := f.client()
	if f.client() != first {
		t.Fatal("a new client although the credentials did not change")
	}
	cred = 2
	second := f.client()
	if second == first || f.client() != second {
		t.Fatal("the same client after the credentials changed")
	}
}

// TestExecuteLocally: with ExecuteLocally a follower runs a resource
// write itself, never forwarding it (the storage layer keeps what it reads
// safe: api/storage/reading.go); reads run here as ever; the writes that
// need the leader's own state (leaderOnly: operator actions, member
// removal) are still forwarded.
func TestExecuteLocally(t *testing.T) {
	lead := &fakeLeadership{}
	lead.addr.Store("127.0.0.1:1") // nothing listens: a forward fails
	s := testServer(t)
	s.cfg.Actions = map[string]http.Handler{"/rotate": http.NotFoundHandler()}
	var served int
	s.cfg.Forward = &ForwardConfig{TLS: &tls.Config{}, Leadership: lead, WaitForLeader: 200 * time.Millisecond, ExecuteLocally: true}
	h := s.withForwarding(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	serve := func(method, path string, info *genericapirequest.RequestInfo) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(`{}`))
		req = req.WithContext(genericapirequest.WithUser(genericapirequest.WithRequestInfo(req.Context(), info), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	create := &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "configmaps", Namespace: "default"}
	for _, tc := range []struct {
		name         string
		method, path string
		info         *genericapirequest.RequestInfo
		served       int
		code         int
	}{
		{"a create runs here", http.MethodPost, "/api/v1/namespaces/default/configmaps", create, 1, 200},
		{"a delete too", http.MethodDelete, "/api/v1/namespaces/default/configmaps/x", &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "delete", APIVersion: "v1", Resource: "configmaps", Namespace: "default", Name: "x"}, 1, 200},
		{"a read runs here", http.MethodGet, "/api/v1/namespaces/default/configmaps", &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "list", APIVersion: "v1", Resource: "configmaps", Namespace: "default"}, 1, 200},
		{"an operator action is forwarded", http.MethodPost, "/rotate", &genericapirequest.RequestInfo{Verb: "post", Path: "/rotate"}, 0, 503},
		{"a member removal is forwarded", http.MethodDelete, membersPath + "/n2", &genericapirequest.RequestInfo{Verb: "delete", Path: membersPath + "/n2"}, 0, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served = 0
			rec := serve(tc.method, tc.path, tc.info)
			if served != tc.served || rec.Code != tc.code {
				t.Fatalf("served %d, code %d (%s); want %d, %d", served, rec.Code, rec.Body, tc.served, tc.code)
			}
		})
	}
}

// TestClientCannotClaimAForwardedWrite: only a node's X-Trustplane-Forwarded-By
// tells a follower that a write was already forwarded once (and so must not
// be bounced on). A client that sends the header itself gets what any client
// gets: its write forwarded to the leader, with the header set by the
// follower, rather than a 503 that says leadership moved.
func TestClientCannotClaimAForwardedWrite(t *testing.T) {
	nodeCA, err := certs.LoadOrCreateNodeCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes := certs.NewNodeVerifier(nodeCA)
	var seenBy atomic.Value
	leader := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenBy.Store(r.Header.Get(headerForwardedBy))
		w.WriteHeader(http.StatusCreated)
	}))
	leader.TLS = &tls.Config{Certificates: []tls.Certificate{nodePair(t, nodeCA, "leader")}}
	leader.StartTLS()
	defer leader.Close()

	lead := &fakeLeadership{}
	lead.addr.Store(leader.Listener.Addr().String())
	s := testServer(t)
	s.cfg.Nodes = nodes
	s.cfg.Forward = &ForwardConfig{TLS: nodes.ClientTLS(certs.NewNodeCert(nodePair(t, nodeCA, "follower"))), Leadership: lead, WaitForLeader: 5 * time.Second}
	h := s.withForwarding(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a follower in leader mode served a write itself")
	}))
	for _, value := range []string{"1", "2", "anything"} {
		t.Run(value, func(t *testing.T) {
			seenBy.Store("")
			req := aliceCreatesConfigMap()
			req.Header.Set(headerForwardedBy, value)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("got %d: %s; want the leader's 201", rec.Code, rec.Body)
			}
			if got, _ := seenBy.Load().(string); got != forwardedBy {
				t.Fatalf("the leader saw X-Trustplane-Forwarded-By %q, want the follower's %q", got, forwardedBy)
			}
		})
	}
}

// aliceCreatesConfigMap is a client's create of a ConfigMap in default as it
// reaches the forwarding filter: authenticated as alice, request info set.
func aliceCreatesConfigMap() *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", strings.NewReader(`{}`))
	return req.WithContext(genericapirequest.WithUser(genericapirequest.WithRequestInfo(req.Context(),
		&genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Resource: "configmaps", Namespace: "default"}),
		&user.DefaultInfo{Name: "alice"}))
}
