package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serveWithDeadline serves one GET through withTimeout with a deadline of
// d, and reports the recorder and what the filter panicked with.
func serveWithDeadline(t *testing.T, d time.Duration, h http.HandlerFunc) (rec *httptest.ResponseRecorder, panicked any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req := httptest.NewRequest(http.MethodGet, "/api/v1/configmaps", nil).WithContext(ctx)
	rec = httptest.NewRecorder()
	func() {
		defer func() { panicked = recover() }()
		withTimeout(h).ServeHTTP(rec, req)
	}()
	return rec, panicked
}

func wantTimeoutStatus(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if rec.Code != http.StatusGatewayTimeout || st.Code != 504 || st.Reason != metav1.StatusReasonTimeout ||
		st.Message != "Timeout: request did not complete within the allotted timeout" {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
}

func TestWithTimeout(t *testing.T) {
	const deadline = 30 * time.Millisecond
	t.Run("a handler that answers in time is untouched", func(t *testing.T) {
		rec, p := serveWithDeadline(t, time.Minute, func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "made")
		})
		if p != nil || rec.Code != http.StatusCreated || rec.Body.String() != "made" || rec.Header().Get("Content-Type") != "text/plain" {
			t.Fatalf("panic %v, got %d %q %v", p, rec.Code, rec.Body, rec.Header())
		}
	})
	t.Run("a handler that gives up at the deadline without answering gets the 504", func(t *testing.T) {
		// Whether the deadline's callback or the returning handler writes
		// it is a race; run it often enough to see both.
		for i := 0; i < 50; i++ {
			rec, p := serveWithDeadline(t, time.Millisecond, func(w http.ResponseWriter, req *http.Request) {
				<-req.Context().Done()
			})
			if p != nil {
				t.Fatalf("panic %v", p)
			}
			wantTimeoutStatus(t, rec)
		}
	})
	t.Run("what a handler writes after the 504 is dropped", func(t *testing.T) {
		writeErr := make(chan error, 1)
		rec, p := serveWithDeadline(t, deadline, func(w http.ResponseWriter, req *http.Request) {
			<-req.Context().Done()
			time.Sleep(20 * time.Millisecond) // let the callback answer first
			w.Header().Set("X-Late", "yes")
			w.WriteHeader(http.StatusOK)
			_, err := io.WriteString(w, "late")
			writeErr <- err
		})
		if p != nil {
			t.Fatalf("panic %v", p)
		}
		wantTimeoutStatus(t, rec)
		if err := <-writeErr; err != http.ErrHandlerTimeout {
			t.Fatalf("late write: %v", err)
		}
		if rec.Header().Get("X-Late") != "" || strings.Contains(rec.Body.String(), "late") {
			t.Fatalf("the late answer leaked: %v %q", rec.Header(), rec.Body)
		}
	})
	t.Run("a response under way at the deadline is cut, not ended as if complete", func(t *testing.T) {
		rec, p := serveWithDeadline(t, deadline, func(w http.ResponseWriter, req *http.Request) {
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"items":[`)
			<-req.Context().Done()
			time.Sleep(20 * time.Millisecond)
			io.WriteString(w, `]}`)
		})
		if p != http.ErrAbortHandler {
			t.Fatalf("panic %v, want http.ErrAbortHandler", p)
		}
		if rec.Code != http.StatusOK || rec.Body.String() != `{"items":[` {
			t.Fatalf("got %d %q", rec.Code, rec.Body)
		}
	})
	t.Run("a request without a deadline is served as it is", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/configmaps?watch=true", nil)
		rec := httptest.NewRecorder()
		var plain bool
		withTimeout(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			_, plain = w.(*httptest.ResponseRecorder)
		})).ServeHTTP(rec, req)
		if !plain {
			t.Fatal("a request without a deadline got the timeout's writer")
		}
	})
}
