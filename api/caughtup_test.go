package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserver "k8s.io/apiserver/pkg/apis/apiserver"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	pluginlog "k8s.io/apiserver/plugin/pkg/audit/log"

	"github.com/trustplane/trustplane/certs"
)

// switchableNodes takes chains ending at the CA held in anchor for nodes;
// the test changes it as a node CA rotation's finish would.
type switchableNodes struct{ anchor **x509.Certificate }

func (n switchableNodes) NodeName(chains [][]*x509.Certificate) (string, error) {
	for _, ch := range chains {
		if *n.anchor != nil && ch[len(ch)-1].Equal(*n.anchor) {
			return ch[0].Subject.CommonName, nil
		}
	}
	return "", errors.New("not a node")
}

// TestStaleNodeCatchesUpBeforeAuthenticating is withCaughtUp's table: a
// node outside the staleness bound authenticates and authorises a
// request only after a catch-up that starts after it arrived, and checks
// a certificate again against the client CAs as caught up. The catch-up
// here is where the "cluster" moves on: it can drop a CA (a rotation's
// finish that the stale node had not applied) or fail (cut off).
func TestStaleNodeCatchesUpBeforeAuthenticating(t *testing.T) {
	clusterCA, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	nodeCA, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	adminChain := chainOf(t, clusterCA, "admin")
	nodeChain := chainOf(t, nodeCA, "node-2")
	forwarded := http.Header{}
	setIdentityHeaders(forwarded, &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}})

	const (
		caughtUp   = "caught up"
		cutOff     = "cut off"
		dropsCA    = "the cluster CA rotated out"
		dropsNodes = "the node CA rotated out"
	)
	tests := []struct {
		name      string
		fresh     bool
		method    string
		path      string
		chains    [][]*x509.Certificate
		header    http.Header
		bearer    bool
		anonymous bool
		anonPaths []string // the anonymous rules' paths; none: every path
		cluster   string   // what the catch-up finds
		wantCode  int
		wantUser  string
		catchUps  int
		watch     bool // refused as a stale node refuses watches
	}{
		{name: "a fresh node never waits", fresh: true, chains: adminChain, cluster: cutOff, wantCode: 200, wantUser: "admin"},
		{name: "a certificate, caught up", chains: adminChain, cluster: caughtUp, wantCode: 200, wantUser: "admin", catchUps: 1},
		{name: "a certificate whose CA was rotated out meanwhile", chains: adminChain, cluster: dropsCA, wantCode: 401, catchUps: 1},
		{name: "a certificate, cut off", chains: adminChain, cluster: cutOff, wantCode: 503, catchUps: 1},
		{name: "a bearer token, cut off: not verified", bearer: true, cluster: cutOff, wantCode: 503, catchUps: 1},
		{name: "a bearer token, caught up", bearer: true, cluster: caughtUp, wantCode: 200, wantUser: "token-user", catchUps: 1},
		{name: "a node's client, caught up", chains: nodeChain, header: forwarded, cluster: caughtUp, wantCode: 200, wantUser: "alice", catchUps: 1},
		{name: "a node's client, the node CA rotated out meanwhile", chains: nodeChain, header: forwarded, cluster: dropsNodes, wantCode: 401, catchUps: 1},
		{name: "anonymous, where the anonymous authenticator would take it", anonymous: true, cluster: cutOff, wantCode: 503, catchUps: 1},
		{name: "no credential and no anonymous: 401 without waiting", cluster: cutOff, wantCode: 401},
		{name: "raft status, cut off: served from the node's state", path: raftPath, chains: adminChain, cluster: cutOff, wantCode: 200, wantUser: "admin"},
		{name: "members, cut off", path: membersPath, chains: adminChain, cluster: cutOff, wantCode: 200, wantUser: "admin"},
		{name: "metrics, cut off", path: metricsPath, chains: adminChain, cluster: cutOff, wantCode: 200, wantUser: "admin"},
		{name: "a goroutine profile, cut off", path: "/debug/pprof/goroutine?debug=1", chains: adminChain, cluster: cutOff, wantCode: 200, wantUser: "admin"},
		{name: "readyz, cut off", path: "/readyz/etcd", cluster: cutOff, wantCode: 200, wantUser: user.Anonymous},
		{name: "version, cut off", path: "/version", cluster: cutOff, wantCode: 200, wantUser: user.Anonymous},
		{name: "a member's removal is not status", method: http.MethodDelete, path: membersPath + "/node-3", chains: adminChain, cluster: cutOff, wantCode: 503, catchUps: 1},
		{name: "raft status impersonating: the rights to would be old", path: raftPath, chains: adminChain, header: http.Header{"Impersonate-User": {"bob"}}, cluster: cutOff, wantCode: 503, catchUps: 1},
		{name: "a health probe holds no slot: it never waits", method: http.MethodPost, path: "/healthz", bearer: true, cluster: cutOff, wantCode: 200, wantUser: "token-user"},
		{name: "a watch holds no slot: refused at once", path: "/api/v1/namespaces/default/serviceaccounts?watch=true", bearer: true, cluster: caughtUp, wantCode: 503, watch: true},
		{name: "the snapshot stream holds no slot: refused at once", path: snapshotPath, chains: adminChain, cluster: cutOff, wantCode: 503},
		{name: "anonymous rules that do not take the path: 401 without waiting", anonymous: true, anonPaths: []string{"/openid/v1/jwks"}, cluster: cutOff, wantCode: 401},
		{name: "anonymous rules that take the path", anonymous: true, anonPaths: []string{"/openid/v1/jwks"}, path: "/openid/v1/jwks", cluster: cutOff, wantCode: 503, catchUps: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, audited := range []bool{false, true} {
				pool := x509.NewCertPool()
				pool.AddCert(clusterCA.Cert)
				pool.AddCert(nodeCA.Cert)
				nodeAnchor := nodeCA.Cert
				catchUps := 0
				var log bytes.Buffer
				s := newTestServer(t, nil, func(c *Config) {
					c.ClientCAs = func() *x509.CertPool { return pool }
					c.Nodes = switchableNodes{&nodeAnchor}
					c.Membership = staleMembership{fakeMembership{in: true}, tt.fresh}
					c.MaxStaleRead = time.Second
					c.CatchUp = func(context.Context) error {
						catchUps++
						switch tt.cluster {
						case cutOff:
							return errors.New("no leader")
						case dropsCA:
							pool = nodeCA.Pool()
						case dropsNodes:
							pool, nodeAnchor = clusterCA.Pool(), nil
						}
						return nil
					}
					c.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
						if catchUps == 0 && tt.catchUps > 0 {
							t.Error("a stale node verified a token before catching up")
						}
						return &authenticator.Response{User: &user.DefaultInfo{Name: "token-user"}}, true, nil
					})
					if tt.anonymous {
						var conds []apiserver.AnonymousAuthCondition
						for _, p := range tt.anonPaths {
							conds = append(conds, apiserver.AnonymousAuthCondition{Path: p})
						}
						c.Anonymous = anonymous.NewAuthenticator(conds)
					}
					if audited {
						c.AuditSink = pluginlog.NewBackend(&log, pluginlog.FormatJson, auditv1.SchemeGroupVersion)
						c.AuditPolicy = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelRequestResponse, nil)
					}
				})
				var gotUser string
				h := filters.WithRequestInfo(s.withTLSAuthentication(s.withCaughtUp(s.withTokenAuthentication(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
					if u, ok := genericapirequest.UserFrom(r.Context()); ok {
						gotUser = u.GetName()
					}
				})))), s.infos)
				if audited {
					h = s.withAuditInit(h)
				}
				method, path := tt.method, tt.path
				if method == "" {
					method = http.MethodGet
				}
				if path == "" {
					path = "/api/v1/namespaces/default/serviceaccounts"
				}
				req := httptest.NewRequest(method, path, nil)
				for k, v := range tt.header {
					req.Header[k] = v
				}
				if tt.bearer {
					req.Header.Set("Authorization", "Bearer some-token")
				}
				if tt.chains != nil {
					req.TLS = &tls.ConnectionState{VerifiedChains: tt.chains, PeerCertificates: []*x509.Certificate{tt.chains[0][0]}}
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != tt.wantCode || gotUser != tt.wantUser || catchUps != tt.catchUps {
					t.Fatalf("audited %v: code %d, user %q, %d catch-ups; want %d, %q, %d: %s", audited, rec.Code, gotUser, catchUps, tt.wantCode, tt.wantUser, tt.catchUps, rec.Body)
				}
				if tt.wantCode == http.StatusServiceUnavailable {
					st := decodeStatus(t, rec)
					want := notCaughtUpMessage
					if tt.watch {
						want = s.staleWatch().ErrStatus.Message
					}
					if st.Reason != metav1.StatusReasonServiceUnavailable || st.Message != want || rec.Header().Get("Retry-After") != "1" || strings.Contains(rec.Body.String(), "some-token") {
						t.Fatalf("status = %+v, Retry-After %q", st, rec.Header().Get("Retry-After"))
					}
					if audited && !strings.Contains(log.String(), `"code":503`) {
						t.Fatalf("the refusal is not audited: %s", log.String())
					}
				}
			}
		})
	}
}

// TestCatchUpWaitersAreBounded: no more requests wait for a catch-up at
// once than max in flight admits, since system:masters passes a full
// max-in-flight table (kube's rule) and would otherwise wait unbounded on
// a cut-off node, with a certificate of a CA it may no longer trust.
func TestCatchUpWaitersAreBounded(t *testing.T) {
	release := make(chan struct{})
	var waiting sync.WaitGroup
	s := newTestServer(t, nil, func(c *Config) {
		c.Membership = staleMembership{fakeMembership{in: true}, false}
		c.MaxStaleRead = time.Second
		c.MaxRequestsInFlight, c.MaxMutatingRequestsInFlight = 1, 1
		c.CatchUp = func(context.Context) error {
			waiting.Done()
			<-release
			return errors.New("no leader")
		}
		c.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "token-user"}}, true, nil
		})
	})
	h := filters.WithRequestInfo(s.withCaughtUp(s.withTokenAuthentication(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))), s.infos)
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
		req.Header.Set("Authorization", "Bearer some-token")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	waiting.Add(2)
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- serve().Code }()
	}
	waiting.Wait() // both wait in the catch-up
	if rec := serve(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("a third waiter beyond the bound of 2: %d %s", rec.Code, rec.Body)
	}
	close(release)
	for range 2 {
		if code := <-done; code != http.StatusServiceUnavailable {
			t.Fatalf("a waiter whose catch-up failed: %d", code)
		}
	}
	waiting.Add(1) // the table is free again
	go func() { done <- serve().Code }()
	if code := <-done; code != http.StatusServiceUnavailable {
		t.Fatalf("after the waiters left: %d", code)
	}
}

// BenchmarkCaughtUpFresh is what every request pays for the rule on a
// node within the bound (one staleness test): the filter against a
// handler that does nothing, with and without it.
func BenchmarkCaughtUpFresh(b *testing.B) {
	s := &Server{cfg: &Config{Membership: staleMembership{fakeMembership{in: true}, true}, MaxStaleRead: time.Second, CatchUp: func(context.Context) error { return nil }}}
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/serviceaccounts", nil)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"without", noop}, {"with", s.withCaughtUp(noop)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(nil, req)
			}
		})
	}
}
