package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/trustplane/trustplane/api/registry"
)

// limitedServer is a Server whose limits filters wrap next; mod changes the
// default config first.
func limitedServer(t *testing.T, mod func(*Config), next http.Handler) http.Handler {
	t.Helper()
	s := testServer(t)
	mod(s.cfg)
	return s.withLimits(next)
}

// limitReq is a request as the limits filters see it: after the RequestInfo
// and authentication filters.
func limitReq(t *testing.T, s *Server, method, target string, groups ...string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	info, err := s.infos.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx := genericapirequest.WithRequestInfo(req.Context(), info)
	ctx = withCaller(ctx, &user.DefaultInfo{Name: "someone", Groups: append(groups, user.AllAuthenticated)}, credentialCertificate)
	return req.WithContext(ctx)
}

// blocking is a handler that signals entry on started and waits for release.
type blocking struct {
	started chan struct{}
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b.started <- struct{}{}
	select {
	case <-b.release:
		w.WriteHeader(http.StatusOK)
	case <-req.Context().Done():
		// Writing now would race the timeout filter's 504.
	}
}

func TestMaxInFlight(t *testing.T) {
	s := testServer(t)
	s.cfg.MaxRequestsInFlight, s.cfg.MaxMutatingRequestsInFlight = 1, 1
	b := newBlocking()
	h := s.withInFlightLimit(b)
	serve := func(req *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	// Occupy the one read-only and the one mutating slot.
	var wg sync.WaitGroup
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		wg.Add(1)
		go func() { defer wg.Done(); serve(limitReq(t, s, m, "/api/v1/namespaces/ns/configmaps")) }()
		<-b.started
	}
	defer func() { close(b.release); wg.Wait() }()

	for _, m := range []string{http.MethodGet, http.MethodPost} {
		t.Run(m+" beyond the limit is 429 with Retry-After, as kube's filter answers", func(t *testing.T) {
			rec := serve(limitReq(t, s, m, "/api/v1/namespaces/ns/configmaps"))
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
				strings.TrimSpace(rec.Body.String()) != "Too many requests, please try again later." {
				t.Fatalf("got %d Retry-After %q: %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
			}
		})
	}
	exempt := []struct {
		name string
		req  *http.Request
	}{
		{"a watch is long-running and not counted", limitReq(t, s, http.MethodGet, "/api/v1/namespaces/ns/configmaps?watch=true")},
		{"a health probe is not counted", limitReq(t, s, http.MethodGet, "/readyz")},
		{"system:masters is served beyond the limit", limitReq(t, s, http.MethodPost, "/api/v1/namespaces/ns/configmaps", user.SystemPrivilegedGroup)},
	}
	for _, tc := range exempt {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan int, 1)
			go func() { done <- serve(tc.req).Code }()
			select {
			case <-b.started:
			case code := <-done:
				t.Fatalf("answered %d without reaching the handler", code)
			case <-time.After(10 * time.Second):
				t.Fatal("never reached the handler")
			}
		})
	}
}

// gatedAuthenticator is a bearer-token authenticator whose "slow" token
// holds its check until release, and which accepts "good" as user
// tokenuser and nothing else.
type gatedAuthenticator struct {
	started, release chan struct{}
}

func (g gatedAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	switch req.Header.Get("Authorization") {
	case "Bearer slow":
		g.started <- struct{}{}
		<-g.release
	case "Bearer good":
		return &authenticator.Response{User: &user.DefaultInfo{Name: "tokenuser"}}, true, nil
	}
	return nil, false, nil
}

// TestInFlightBoundsCredentialChecks: max in flight runs before bearer
// tokens are checked and before authorisation, so while a token check
// holds the only read-only slot, requests with no credential, a bad token
// or no RBAC rights get kube's 429 instead of their 401 or 403 (their
// cost is bounded like any request's), while system:masters, known from
// its certificate before the limit, and health probes are still served.
func TestInFlightBoundsCredentialChecks(t *testing.T) {
	gate := gatedAuthenticator{started: make(chan struct{}, 1), release: make(chan struct{})}
	s := newTestServer(t, registry.CoreResources(), func(c *Config) {
		c.MaxRequestsInFlight, c.MaxMutatingRequestsInFlight = 1, 1
		c.Authenticator = gate
		c.Authorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			for _, g := range a.GetUser().GetGroups() {
				if g == user.SystemPrivilegedGroup {
					return authorizer.DecisionAllow, "", nil
				}
			}
			return authorizer.DecisionDeny, "", nil
		})
	})
	get := func(target, token string, groups ...string) *http.Request {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if groups != nil {
			leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "certuser", Organization: groups}}
			req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
		}
		return req
	}
	const list = "/api/v1/namespaces/default/configmaps"
	const refused = http.StatusTooManyRequests
	tests := []struct {
		name string
		req  *http.Request
		free int // the answer with the slot free
		held int // the answer while the slow token check holds it
	}{
		{"no credential: 401, and 429 while the slot is held", get(list, ""), 401, refused},
		{"a bad token: 401, and 429 while the slot is held", get(list, "bad"), 401, refused},
		{"a good token without rights: 403, and 429 while the slot is held", get(list, "good"), 403, refused},
		{"a certificate without rights: 403, and 429 while the slot is held", get(list, "", "team"), 403, refused},
		{"a path no route serves: 401, and 429 while the slot is held", get("/api/v1/namespaces/default/madeup", ""), 401, refused},
		{"a certificate without rights on discovery: 403, and 429 while the slot is held", get("/api", "", "team"), 403, refused},
		{"system:masters is served while the slot is held", get("/api", "", user.SystemPrivilegedGroup), 200, 200},
		{"a health probe is served while the slot is held", get("/livez", ""), 200, 200},
	}
	serve := func(req *http.Request) int {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req.Clone(req.Context()))
		return rec.Code
	}
	for _, tt := range tests {
		if got := serve(tt.req); got != tt.free {
			t.Fatalf("%s: with the slot free: %d, want %d", tt.name, got, tt.free)
		}
	}
	c := metricsClient{t: t, s: s}
	refusedCMs := map[string]string{"resource": "configmaps", "code": "429"}
	before, _ := sample(c.scrape(), "apiserver_request_total", refusedCMs)
	done := make(chan int, 1)
	go func() { done <- serve(get(list, "slow")) }()
	<-gate.started
	defer func() {
		close(gate.release)
		if code := <-done; code != http.StatusUnauthorized {
			t.Errorf("the slow token's request: %d, want 401", code)
		}
	}()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serve(tt.req); got != tt.held {
				t.Fatalf("while the slot is held: %d, want %d", got, tt.held)
			}
		})
	}
	t.Run("a 429 of a path no route serves adds no series of its resource", func(t *testing.T) {
		fams := c.scrape()
		if _, ok := sample(fams, "apiserver_request_total", map[string]string{"resource": "madeup"}); ok {
			t.Fatal("a made-up resource labels apiserver_request_total")
		}
		if v, _ := sample(fams, "apiserver_request_total", refusedCMs); v != before+4 {
			t.Fatalf("apiserver_request_total{resource=configmaps,code=429} went from %v to %v, want the four 429s of a served route", before, v)
		}
	})
}

func TestWatchLimit(t *testing.T) {
	s := testServer(t)
	s.cfg.MaxWatches = 1
	b := newBlocking()
	h := s.withLimits(b)
	go h.ServeHTTP(httptest.NewRecorder(), limitReq(t, s, http.MethodGet, "/api/v1/configmaps?watch=true"))
	<-b.started
	defer close(b.release)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, limitReq(t, s, http.MethodGet, "/api/v1/configmaps?watch=true", user.SystemPrivilegedGroup))
	st := decodeStatus(t, rec)
	if rec.Code != http.StatusTooManyRequests || st.Reason != metav1.StatusReasonTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("got %d %+v", rec.Code, st)
	}
	if want := "too many watches on this server (limit 1), please try again later"; st.Message != want {
		t.Fatalf("message %q, want %q", st.Message, want)
	}
	// A list is not a watch.
	go h.ServeHTTP(httptest.NewRecorder(), limitReq(t, s, http.MethodGet, "/api/v1/configmaps"))
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("a list was held back by the watch cap")
	}
}

// TestWatchCap: the watch cap's bounds, step by step on one cap of 20
// watches (2 reserved) and 3 per user. Each step takes a slot for a
// caller, or is refused with the message of the bound it hits.
func TestWatchCap(t *testing.T) {
	const (
		global   = "too many watches on this server (limit 20), please try again later"
		reserved = "too many watches on this server (limit 20, of which 2 are kept for system components), please try again later"
		perUser  = "too many watches by this user on this server (limit 3 per user), please try again later"
	)
	type step struct {
		name   string
		user   string
		system bool
		n      int    // watches to take
		refuse string // "" if all n are taken; else the last is refused so
	}
	steps := []step{
		{"a user takes watches up to the per-user limit", "alice", false, 3, ""},
		{"the next watch of that user is refused", "alice", false, 1, perUser},
		{"another user is not held back by the first", "bob", false, 3, ""},
		{"a system identity is not bound by the per-user limit", "system:apiserver", true, 5, ""},
		{"users take the rest of the users' share", "", false, 7, ""}, // u0..u6, one each: 18 running
		{"a user is refused the reserve", "carol", false, 1, reserved},
		{"a system identity takes the reserve", "system:apiserver", true, 2, ""},
		{"no one gets past the cap", "system:apiserver", true, 1, global},
	}
	c := newWatchCap(20, 3)
	if c.reserve != 2 {
		t.Fatalf("reserve %d, want 2", c.reserve)
	}
	var releases []func()
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			for i := range st.n {
				who := st.user
				if who == "" {
					who = fmt.Sprintf("u%d", i)
				}
				release, err := c.acquire(who, st.system)
				last := i == st.n-1
				if st.refuse != "" && last {
					var se apierrors.APIStatus
					if !errors.As(err, &se) || se.Status().Code != http.StatusTooManyRequests || se.Status().Message != st.refuse ||
						se.Status().Details == nil || se.Status().Details.RetryAfterSeconds != 1 {
						t.Fatalf("watch %d: %v, want 429 %q retry after 1s", i, err, st.refuse)
					}
					return
				}
				if err != nil {
					t.Fatalf("watch %d refused: %v", i, err)
				}
				releases = append(releases, release)
			}
		})
	}
	t.Run("released slots are free again, once each", func(t *testing.T) {
		for _, r := range releases {
			r()
			r()
		}
		if c.running != 0 || len(c.byUser) != 0 {
			t.Fatalf("after release: %d running, %v", c.running, c.byUser)
		}
	})
	t.Run("no bound at all is no cap", func(t *testing.T) {
		if newWatchCap(0, 0) != nil {
			t.Fatal("a cap without bounds")
		}
	})
}

// TestSystemCaller: who is a system identity for the watch cap depends on
// the credential that proved the caller, not on the name alone.
func TestSystemCaller(t *testing.T) {
	s := testServer(t)
	u := func(name string, groups ...string) user.Info { return &user.DefaultInfo{Name: name, Groups: groups} }
	tests := []struct {
		name string
		c    caller
		want bool
	}{
		{"system:masters by certificate", caller{u("admin", user.SystemPrivilegedGroup), credentialCertificate}, true},
		{"system:masters by a static token (kube's rule: any credential)", caller{u("root", user.SystemPrivilegedGroup), credentialToken}, true},
		{"system:masters forwarded by a peer node", caller{u("admin", user.SystemPrivilegedGroup), credentialForwarded}, true},
		{"a peer node's own certificate", caller{u("system:trustplane-node:n2", "system:trustplane-nodes"), credentialNode}, true},
		{"a controller's certificate from the loopback CA", caller{u("system:serviceaccount:kube-system:namespace-controller"), credentialComponent}, true},
		{"kube-controller-manager's name on a certificate of another CA is not", caller{u("system:kube-controller-manager"), credentialCertificate}, false},
		{"a controller's name on a certificate of another CA is not", caller{u("system:serviceaccount:kube-system:namespace-controller"), credentialCertificate}, false},
		{"a token for a controller's ServiceAccount is not", caller{u("system:serviceaccount:kube-system:namespace-controller", "system:serviceaccounts"), credentialToken}, false},
		{"a controller's name forwarded by a peer is not", caller{u("system:serviceaccount:kube-system:namespace-controller"), credentialForwarded}, false},
		{"a certificate of another kube-system ServiceAccount is not", caller{u("system:serviceaccount:kube-system:default"), credentialCertificate}, false},
		{"a node's name on a cluster-CA certificate is not", caller{u("system:trustplane-node:n2", "system:trustplane-nodes"), credentialCertificate}, false},
		{"an ordinary user is not", caller{u("alice"), credentialCertificate}, false},
		{"no caller is not", caller{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.systemCaller(tt.c); got != tt.want {
				t.Fatalf("systemCaller = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWatchLimitChargesTheAuthenticatedCaller: the watch cap charges and
// exempts the caller authentication proved, whoever it impersonates.
func TestWatchLimitChargesTheAuthenticatedCaller(t *testing.T) {
	s := testServer(t)
	s.cfg.MaxWatches, s.cfg.MaxWatchesPerUser = 100, 1
	b := newBlocking()
	h := s.withLimits(b)
	watch := func(real, effective user.Info, cred credential) *http.Request {
		req := limitReq(t, s, http.MethodGet, "/api/v1/configmaps?watch=true")
		ctx := withCaller(req.Context(), real, cred)
		return req.WithContext(genericapirequest.WithUser(ctx, effective))
	}
	alice := &user.DefaultInfo{Name: "alice"}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
	go h.ServeHTTP(httptest.NewRecorder(), watch(alice, alice, credentialCertificate))
	<-b.started
	defer close(b.release)
	tests := []struct {
		name string
		req  *http.Request
		code int
	}{
		{"impersonating someone else does not give a second budget", watch(alice, &user.DefaultInfo{Name: "bob"}, credentialCertificate), http.StatusTooManyRequests},
		{"impersonating system:masters does not exempt", watch(alice, admin, credentialCertificate), http.StatusTooManyRequests},
		{"system:masters impersonating a user is still exempt", watch(admin, alice, credentialCertificate), http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan int, 1)
			go func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, tt.req)
				done <- rec.Code
			}()
			select {
			case <-b.started:
				if tt.code != http.StatusOK {
					t.Fatal("the watch was let through")
				}
			case code := <-done:
				if code != tt.code {
					t.Fatalf("answered %d, want %d", code, tt.code)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no answer")
			}
		})
	}
}

func TestRequestTimeout(t *testing.T) {
	s := testServer(t)
	s.cfg.RequestTimeout = 50 * time.Millisecond
	h := s.withLimits(newBlocking())
	t.Run("a request that runs past the timeout gets kube's 504", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, limitReq(t, s, http.MethodGet, "/api/v1/configmaps"))
		// kube's timeout filter encodes the Status as it is, without kind
		// and apiVersion.
		var st metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusGatewayTimeout || st.Code != 504 || st.Reason != metav1.StatusReasonTimeout ||
			st.Message != "Timeout: request did not complete within the allotted timeout" {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
	})
	t.Run("the request the timeout ended is counted, as kube counts it", func(t *testing.T) {
		terminated := func() float64 {
			fams, err := legacyregistry.DefaultGatherer.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var v float64
			for _, f := range fams {
				if f.GetName() != "apiserver_request_terminations_total" {
					continue
				}
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "code" && l.GetValue() == "504" {
							v += m.GetCounter().GetValue()
						}
					}
				}
			}
			return v
		}
		before := terminated()
		h.ServeHTTP(httptest.NewRecorder(), limitReq(t, s, http.MethodGet, "/api/v1/configmaps"))
		if after := terminated(); after != before+1 {
			t.Fatalf("apiserver_request_terminations_total{code=504} went from %v to %v", before, after)
		}
	})
	t.Run("a malformed ?timeout= is 400", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, limitReq(t, s, http.MethodGet, "/api/v1/configmaps?timeout=soon"))
		if st := decodeStatus(t, rec); rec.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest {
			t.Fatalf("got %d %+v", rec.Code, st)
		}
	})
	t.Run("a watch has no deadline", func(t *testing.T) {
		var deadline bool
		h := s.withLimits(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			_, deadline = req.Context().Deadline()
		}))
		h.ServeHTTP(httptest.NewRecorder(), limitReq(t, s, http.MethodGet, "/api/v1/configmaps?watch=true"))
		if deadline {
			t.Fatal("a watch got a deadline")
		}
	})
}

// TestSlowBodyIsCutOff: a client that sends its headers, then trickles its
// body, is cut off when the request deadline passes.
func TestSlowBodyIsCutOff(t *testing.T) {
	s := testServer(t)
	s.cfg.RequestTimeout = 300 * time.Millisecond
	readErr := make(chan error, 1)
	h := s.withLimits(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, err := io.ReadAll(req.Body)
		readErr <- err
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := genericapirequest.WithRequestInfo(req.Context(), mustInfo(t, s, req))
		h.ServeHTTP(w, req.WithContext(genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "x"})))
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /api/v1/namespaces/ns/configmaps HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 50 ms, for at most 10 s
		for i := 0; i < 200; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the trickled body was read to the end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the body read was not cut off")
	}
}

func mustInfo(t *testing.T, s *Server, req *http.Request) *genericapirequest.RequestInfo {
	t.Helper()
	info, err := s.infos.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not met within 10s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
