package api

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics/legacyregistry"
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
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "someone", Groups: append(groups, user.AllAuthenticated)})
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
	h := s.withLimits(b)
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
