package api

import (
	"fmt"
	"net/http"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/trustplane/trustplane/api/registry"
)

// Overload protection. The filters here bound what one request, and all
// requests together, may cost the node, the way kube-apiserver's generic
// filters do:
//
//   - max in flight (kube's own filter): at most MaxRequestsInFlight
//     read-only and MaxMutatingRequestsInFlight mutating requests run at
//     once; further ones get 429 "Too many requests, please try again
//     later." with Retry-After: 1. Long-running requests and health
//     probes are not counted, and system:masters is served even when the
//     limit is reached (kube's rule: the super-admin always gets an answer).
//   - watch cap: at most MaxWatches watches run at once on this node; more
//     get 429 with a Status.
//   - request timeout: a request that is not long-running gets a deadline
//     of RequestTimeout (or a shorter ?timeout=; kube's filter) and 504
//     with kube's Timeout Status when it passes (withTimeout, which runs
//     the handler on the request's goroutine). The same deadline is the
//     read deadline of its body, so a client trickling a body is cut off.
//   - pending connections (package connlimit, wired in Serve): at most
//     MaxPendingConnections accepted connections may be in their TLS
//     handshake or before their first request at once. A new connection
//     is never refused: when the table is full its oldest connection is
//     closed, and one client address holds at most
//     MaxPendingConnectionsPerSource of it (an eighth by default), so
//     idle sockets, even reopened without end, cannot lock clients or
//     probes out (kube-apiserver has no such table, and never locks
//     out). A connection must send its first byte (the ClientHello)
//     within FirstByteTimeout and finish its handshake and send its
//     first request within HandshakeTimeout. Drops are counted in
//     trustplane_connections_dropped_total{listener="api"} and logged at
//     warn level, one line per interval.

// longRunning is kube-apiserver's long-running check: watches, proxy and
// the streaming subresources. Such requests have no deadline and are not
// counted in flight.
var longRunning = genericfilters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"),
)

// isLongRunning is longRunning plus the snapshot stream, whose length
// grows with the state (snapshot.go).
func isLongRunning(req *http.Request, info *genericapirequest.RequestInfo) bool {
	return longRunning(req, info) || req.URL.Path == snapshotPath
}

// isHealthProbe reports the health paths (the public paths but /version),
// which kube's priority-and-fairness exempts (the "probes" flow schema) so
// that overload never fails a probe.
func isHealthProbe(path string) bool { return path != "/version" && isPublic(path) }

// notCountedInFlight is what the max-in-flight filter lets through without
// a slot: long-running requests and health probes.
func notCountedInFlight(req *http.Request, info *genericapirequest.RequestInfo) bool {
	return isLongRunning(req, info) || isHealthProbe(req.URL.Path)
}

// withLimits wraps next in the overload filters, outermost first: max in
// flight, the watch cap, the request deadline, the body read deadline, and
// the timeout. It needs the RequestInfo and the user in the context.
func (s *Server) withLimits(next http.Handler) http.Handler {
	h := next
	if s.cfg.RequestTimeout > 0 {
		h = withTimeout(h)
		h = withBodyReadDeadline(h)
		h = filters.WithRequestDeadline(h, nil, nil, isLongRunning, registry.Codecs, s.cfg.RequestTimeout)
	}
	h = s.withWatchLimit(h)
	return genericfilters.WithMaxInFlightLimit(h, s.cfg.MaxRequestsInFlight, s.cfg.MaxMutatingRequestsInFlight, notCountedInFlight)
}

// withBodyReadDeadline makes the request's deadline the read deadline of
// its body, so a client that trickles a body cannot hold a handler (and its
// in-flight slot) past the request timeout. The deadline applies to the
// connection (HTTP/1) or stream (HTTP/2) only while this request is read;
// net/http sets its own deadlines before the next request.
func withBodyReadDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if d, ok := req.Context().Deadline(); ok && req.Body != nil && req.Body != http.NoBody {
			// ErrNotSupported (a test recorder) leaves the body unbounded in
			// time but still bounded in size.
			_ = http.NewResponseController(w).SetReadDeadline(d)
		}
		next.ServeHTTP(w, req)
	})
}

// withWatchLimit caps the watches running at once on this node. Each watch
// costs a goroutine and a position in the watch cache for as long as the
// client stays; the cap turns a flood of watches into 429s, which clients
// (client-go's reflectors) retry after Retry-After.
func (s *Server) withWatchLimit(next http.Handler) http.Handler {
	max := int64(s.cfg.MaxWatches)
	if max <= 0 {
		return next
	}
	var running atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := genericapirequest.RequestInfoFrom(req.Context())
		if !ok || info.Verb != "watch" {
			next.ServeHTTP(w, req)
			return
		}
		if running.Add(1) > max {
			running.Add(-1)
			s.writeError(w, req, apierrors.NewTooManyRequests(
				fmt.Sprintf("too many watches on this server (limit %d), please try again later", max), 1))
			return
		}
		defer running.Add(-1)
		next.ServeHTTP(w, req)
	})
}
