package api

import (
	"net/http"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// growStack grows the calling goroutine's stack at once to hold a frame of
// writeStackFrame bytes, where it is still shallow, so that a write's deep
// call chains (kube's FieldManager and structured-merge-diff recurse
// through every object they merge and compare) do not grow it by doublings
// later, each copying a deep stack and adjusting every frame on it. Every
// request runs on a goroutine of its own (net/http's HTTP/2 server starts
// one per stream), started with the small stack the runtime's average
// suggests; the live server's profiles of creates and applies showed 6-9%
// of its CPU in runtime.copystack. CockroachDB does the same
// (util/growstack).
//
// It reads, and never writes, anything shared: requests call it at once.
//
//go:noinline
func growStack() byte {
	var frame [writeStackFrame]byte
	return frame[stackIndex]
}

// writeStackFrame is the frame growStack puts on the stack; the runtime
// grows a stack to the next power of two that holds it above what is in
// use.
const writeStackFrame = 32 << 10

// stackIndex is never written; indexing the frame with a variable keeps
// the compiler from dropping it.
var stackIndex = 0

// withGrownStack grows the stack of every request that is not long-running
// at once (growStack), before kube's filters and the handler deepen it: the
// impersonation filter's frames alone grew it once per request, the
// response's negotiation again. A watch keeps its small stack: it lives
// long and there may be thousands of them.
func withGrownStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if info, ok := genericapirequest.RequestInfoFrom(req.Context()); ok && !isLongRunning(req, info) {
			growStack()
		}
		next.ServeHTTP(w, req)
	})
}
