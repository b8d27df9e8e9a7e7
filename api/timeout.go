package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	endpointsmetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// withTimeout answers kube's 504 when a request's deadline passes before
// its handler has answered, as kube's WithTimeoutForNonLongRunningRequests
// does, but runs the handler on the request's own goroutine.
//
// kube's filter runs every handler on a second goroutine and waits for it
// or the deadline, whichever is first. That costs each request a goroutine
// start, a stack grown twice over (once per goroutine), a request clone and
// a channel handoff: 5-7% of a TokenReview's server CPU in the request-path
// round's profiles. Here the deadline fires a callback instead
// (context.AfterFunc), which writes the 504 if the handler has not started
// its response; the handler's later writes are dropped. The rules kept:
//
//   - the 504 body is kube's: the Status without kind and apiVersion, code
//     504, reason Timeout, "Timeout: request did not complete within the
//     allotted timeout";
//   - a response the handler has started when the deadline passes is cut
//     off with http.ErrAbortHandler (an HTTP/2 RST_STREAM), never ended as
//     if complete; the cut comes when the handler returns;
//   - the handler's header map is its own until it writes the status, so
//     the callback never reads a map the handler is writing.
//
// What differs from kube: the 504 is complete only when the handler
// returns, so the filter relies on the handlers observing the request's
// context (every wait here does: Raft proposals, read-index waits, the
// forwarded request, the body's read deadline). kube's filter would end the
// response at the deadline and leave the handler running on its goroutine,
// holding nothing the client waits for.
func withTimeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		if _, ok := ctx.Deadline(); !ok {
			// Long-running requests get no deadline (WithRequestDeadline).
			next.ServeHTTP(w, req)
			return
		}
		tw := &timeoutWriter{w: w, req: req}
		stop := context.AfterFunc(ctx, tw.timeout)
		next.ServeHTTP(tw, req)
		if stop() && ctx.Err() == nil {
			return
		}
		// The context ended first. The callback may not have run yet, or
		// never will (a handler can see the context done before its
		// callbacks are started): a handler that saw the deadline and gave
		// up without answering still gets the 504, and a late callback,
		// finding the request finished, does nothing.
		tw.mu.Lock()
		if !tw.timedOut && !tw.handlerWrote {
			tw.timeoutLocked()
		}
		tw.finished = true
		cut := tw.timedOut && tw.handlerWrote
		tw.mu.Unlock()
		if cut {
			panic(http.ErrAbortHandler)
		}
	})
}

// errRequestTimeout is kube's timeout filter's Status.
var errRequestTimeout = apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)

// timeoutWriter serialises the handler's writes and the deadline's 504.
type timeoutWriter struct {
	w   http.ResponseWriter
	req *http.Request // for the termination metric
	// header is the handler's header map, copied to w's when the handler
	// writes its status; only the handler's goroutine touches it.
	header http.Header

	mu           sync.Mutex
	handlerWrote bool // the handler wrote its status
	timedOut     bool // the deadline passed first; the handler's writes are dropped
	finished     bool // the handler returned; the callback must not write
}

func (tw *timeoutWriter) Header() http.Header {
	if tw.header == nil {
		tw.header = http.Header{}
	}
	return tw.header
}

func (tw *timeoutWriter) WriteHeader(code int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.writeHeaderLocked(code)
}

func (tw *timeoutWriter) writeHeaderLocked(code int) {
	if tw.timedOut || tw.handlerWrote {
		return
	}
	tw.handlerWrote = true
	dst := tw.w.Header()
	for k, v := range tw.header {
		dst[k] = v
	}
	tw.w.WriteHeader(code)
}

func (tw *timeoutWriter) Write(p []byte) (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.timedOut {
		return 0, http.ErrHandlerTimeout
	}
	tw.writeHeaderLocked(http.StatusOK)
	return tw.w.Write(p)
}

// Flush lets a handler push what it has written, as kube's writer does.
func (tw *timeoutWriter) Flush() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.timedOut {
		return
	}
	if f, ok := tw.w.(http.Flusher); ok {
		tw.writeHeaderLocked(http.StatusOK)
		f.Flush()
	}
}

// timeout runs when the request's context ends before the handler
// returns: at the deadline, or when the client goes away.
func (tw *timeoutWriter) timeout() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if !tw.finished {
		tw.timeoutLocked()
	}
}

// timeoutLocked drops the handler's further writes and answers kube's 504,
// unless the handler has started its response: withTimeout then cuts it.
func (tw *timeoutWriter) timeoutLocked() {
	tw.timedOut = true
	if tw.handlerWrote {
		return
	}
	tw.w.WriteHeader(http.StatusGatewayTimeout)
	_ = json.NewEncoder(tw.w).Encode(&errRequestTimeout.ErrStatus)
	if f, ok := tw.w.(http.Flusher); ok {
		f.Flush()
	}
	// kube's timeout filter counts the request it ended
	// (apiserver_request_terminations_total).
	if info, ok := genericapirequest.RequestInfoFrom(tw.req.Context()); ok {
		endpointsmetrics.RecordRequestTermination(tw.req, info, endpointsmetrics.APIServerComponent, http.StatusGatewayTimeout)
	}
}
