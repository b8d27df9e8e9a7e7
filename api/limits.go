package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/trustplane/trustplane/api/registry"
)

// Overload protection. The filters here bound what one request, and all
// requests together, may cost the node, the way kube-apiserver's generic
// filters do:
//
//   - max in flight (kube's own filter, withInFlightLimit): at most
//     MaxRequestsInFlight read-only and MaxMutatingRequestsInFlight
//     mutating requests run at once; further ones get 429 "Too many
//     requests, please try again later." with Retry-After: 1. Long-running
//     requests and health probes are not counted, and system:masters is
//     served even when the limit is reached (kube's rule: the super-admin
//     always gets an answer). It runs before bearer tokens are checked and
//     before authorisation, so a flood of bad credentials (401) or of
//     requests RBAC refuses (403) waits for the same slots as everything
//     else instead of costing the node without bound.
//   - watch cap (withWatchLimit): at most MaxWatches watches run at once on
//     this node; a tenth of them is kept for system identities
//     (systemCaller), and any other caller may hold at most
//     MaxWatchesPerUser. Beyond a bound: 429 with a Status.
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

// withLimits wraps next in the overload filters that need the effective
// user and the authorisation decision, outermost first: the watch cap, the
// request deadline, the body read deadline, and the timeout. Max in
// flight runs earlier (withInFlightLimit).
func (s *Server) withLimits(next http.Handler) http.Handler {
	h := next
	if s.cfg.RequestTimeout > 0 {
		h = withTimeout(h)
		h = withBodyReadDeadline(h)
		h = filters.WithRequestDeadline(h, nil, nil, isLongRunning, registry.Codecs, s.cfg.RequestTimeout)
	}
	return s.withWatchLimit(h)
}

// withInFlightLimit is kube's max-in-flight filter. It must run after the
// RequestInfo filter and the identities TLS proves (withTLSAuthentication:
// the one place a system:masters caller is known before any cost is
// paid), and before bearer tokens are checked (withTokenAuthentication)
// and requests authorised, so that every request that is not long-running
// holds a slot while its credential is checked: kube places its filter
// after authentication, which leaves 401s unbounded; here a token check
// that falls back to a read through the leader (api/authn) is bounded too.
//
// kube's filter records each 429 in apiserver_request_total and
// apiserver_request_terminations_total under the request's group,
// version and resource. Before authentication those are anyone's to
// choose, so it is handed a RequestInfo whose resource labels are blanked
// unless the route is served (metricRoute), and the chain after it gets
// the request's own RequestInfo back.
func (s *Server) withInFlightLimit(next http.Handler) http.Handler {
	if s.cfg.MaxRequestsInFlight == 0 && s.cfg.MaxMutatingRequestsInFlight == 0 {
		return next
	}
	restored := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if info, ok := req.Context().Value(unlabelledInfoKey{}).(*genericapirequest.RequestInfo); ok {
			req = req.WithContext(genericapirequest.WithRequestInfo(req.Context(), info))
		}
		next.ServeHTTP(w, req)
	})
	limited := genericfilters.WithMaxInFlightLimit(restored, s.cfg.MaxRequestsInFlight, s.cfg.MaxMutatingRequestsInFlight, notCountedInFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if info, ok := genericapirequest.RequestInfoFrom(req.Context()); ok && info.IsResourceRequest {
			if _, served := s.metricRoute(info); !served {
				ctx := context.WithValue(req.Context(), unlabelledInfoKey{}, info)
				req = req.WithContext(genericapirequest.WithRequestInfo(ctx, unlabelled(info)))
			}
		}
		limited.ServeHTTP(w, req)
	})
}

// unlabelledInfoKey holds the request's own RequestInfo while kube's
// max-in-flight filter sees unlabelled's copy.
type unlabelledInfoKey struct{}

// unlabelled is info without what would label a metric series: group,
// version, resource, subresource, name. The verb, which tells kube's
// filter read-only from mutating and watches from the rest, is kept.
func unlabelled(info *genericapirequest.RequestInfo) *genericapirequest.RequestInfo {
	c := *info
	c.APIGroup, c.APIVersion, c.Resource, c.Subresource, c.Name = "", "", "", "", ""
	c.Parts = nil
	return &c
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
// (client-go's reflectors) retry after Retry-After. It runs after
// authorisation, so a watch RBAC refuses takes no slot, and charges the
// caller authentication proved (callerFrom), not the user it impersonates:
// impersonating many users spreads no one's watches over many budgets, and
// impersonating a system identity does not make a caller one.
func (s *Server) withWatchLimit(next http.Handler) http.Handler {
	c := newWatchCap(s.cfg.MaxWatches, s.cfg.MaxWatchesPerUser)
	if c == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := genericapirequest.RequestInfoFrom(req.Context())
		if !ok || info.Verb != "watch" {
			next.ServeHTTP(w, req)
			return
		}
		who, _ := callerFrom(req.Context())
		release, err := c.acquire(who.name(), s.systemCaller(who))
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		defer release()
		next.ServeHTTP(w, req)
	})
}

// watchCap counts the watches running on this node against three bounds:
//
//   - max: every watch, a system identity's too. 0: no bound.
//   - reserve: the last watchReserve(max) slots are for system identities
//     only. Any other caller is refused while fewer are free, so however
//     many ordinary users (or ServiceAccounts an attacker can create)
//     there are, they can never take the slots the node's own informers,
//     controllers and system:masters need.
//   - perUser: the watches one caller who is not a system identity may
//     hold. 0: no bound.
//
// System identities are exempt from perUser and from the reserve.
type watchCap struct {
	max, reserve, perUser int

	mu      sync.Mutex
	running int
	byUser  map[string]int // ordinary callers' watches; no zero entries
}

// newWatchCap returns the cap for max and perUser, or nil when both are 0.
func newWatchCap(max, perUser int) *watchCap {
	if max <= 0 && perUser <= 0 {
		return nil
	}
	return &watchCap{max: max, reserve: watchReserve(max), perUser: perUser, byUser: map[string]int{}}
}

// watchReserve is the part of a cap of max watches that only system
// identities may take: a tenth, at least one when max allows one to each
// side.
func watchReserve(max int) int {
	if max < 2 {
		return 0
	}
	return (max + 9) / 10
}

// acquire takes a slot for a watch of user, a system identity or not, and
// returns the func that gives it back; or, past a bound, kube's 429
// TooManyRequests Status with Retry-After 1, and no slot.
func (c *watchCap) acquire(user string, system bool) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.max > 0 && c.running >= c.max:
		return nil, tooManyWatches(fmt.Sprintf("too many watches on this server (limit %d), please try again later", c.max))
	case !system && c.max > 0 && c.running >= c.max-c.reserve:
		return nil, tooManyWatches(fmt.Sprintf("too many watches on this server (limit %d, of which %d are kept for system components), please try again later", c.max, c.reserve))
	case !system && c.perUser > 0 && c.byUser[user] >= c.perUser:
		return nil, tooManyWatches(fmt.Sprintf("too many watches by this user on this server (limit %d per user), please try again later", c.perUser))
	}
	c.running++
	if !system {
		c.byUser[user]++
	}
	var once sync.Once
	return func() { once.Do(func() { c.release(user, system) }) }, nil
}

func (c *watchCap) release(user string, system bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	if system {
		return
	}
	if c.byUser[user]--; c.byUser[user] == 0 {
		delete(c.byUser, user)
	}
}

// tooManyWatches is the watch cap's refusal: kube's 429 Status, retry
// after a second.
func tooManyWatches(msg string) error { return apierrors.NewTooManyRequests(msg, 1) }

// Who sent a request. The user in a request's context is the effective
// one, which impersonation replaces; the watch cap needs the caller
// authentication proved, and how it proved it.

// credential is how authentication proved a caller's identity.
type credential int

const (
	// credentialNone: no credential (anonymous, the public paths).
	credentialNone credential = iota
	// credentialToken: a bearer token (a ServiceAccount's, the bootstrap
	// token, a static token).
	credentialToken
	// credentialForwarded: a peer node's X-Remote-* headers, for its
	// client, whose own credential this node has not seen.
	credentialForwarded
	// credentialCertificate: a client certificate the TLS handshake
	// verified against the client CAs.
	credentialCertificate
	// credentialNode: a peer node's own certificate, from the node CA
	// (Config.Nodes), which no API signer uses.
	credentialNode
	// credentialComponent: a certificate of this node's own components,
	// from its loopback CA (Config.Components), which exists in this
	// process only; or a peer node's component, as that node's
	// certificate vouches when it forwards the component's write
	// (headerForwardedCaller).
	credentialComponent
)

// caller is a request's authenticated caller.
type caller struct {
	user user.Info
	cred credential
}

// name is the caller's user name; "" when there is none.
func (c caller) name() string {
	if c.user == nil {
		return ""
	}
	return c.user.GetName()
}

type callerKey struct{}

// withCaller records the caller authentication proved, and sets it as the
// request's user.
func withCaller(ctx context.Context, u user.Info, cred credential) context.Context {
	return genericapirequest.WithUser(context.WithValue(ctx, callerKey{}, caller{user: u, cred: cred}), u)
}

// callerFrom is the caller withCaller recorded.
func callerFrom(ctx context.Context) (caller, bool) {
	c, ok := ctx.Value(callerKey{}).(caller)
	return c, ok
}

// FromComponent reports whether ctx's request is one of the cluster's own
// components acting as itself: its caller, as authentication proved it,
// holds a certificate of a node's loopback CA (credentialComponent), and
// its user is that caller's, not one it impersonates. A name is never
// enough (systemCaller says why). Admission's rules for the controllers'
// lease read it (cmd/trustplane/controllerslease.go), and a follower
// forwarding the request vouches for it (forwarder.send).
func FromComponent(ctx context.Context) bool {
	c, ok := callerFrom(ctx)
	if !ok || c.cred != credentialComponent || c.user == nil {
		return false
	}
	u, ok := genericapirequest.UserFrom(ctx)
	return ok && u == c.user
}

// systemCaller decides who is a system identity, for the watch cap: exempt
// from the per-user bound and allowed into the reserve. A system identity
// is
//
//   - a member of system:masters, however authenticated (kube's rule for
//     max in flight: the super-admin, and the node's loopback clients,
//     which carry that group);
//   - a peer node's own certificate (credentialNode): only the node CA
//     issues those, and no API signer uses it;
//   - the node's own components (credentialComponent: its loopback
//     clients and controllers, whose certificates only this process's
//     loopback CA issues).
//
// A name is never enough: a bearer token for a kube-system ServiceAccount
// is what anyone allowed to create serviceaccounts/token there can
// obtain, and a certificate naming system:kube-controller-manager is what
// a kube-apiserver-client approver can give anyone. Impersonation changes
// none of this: the caller is the one authentication proved (callerFrom).
func (s *Server) systemCaller(c caller) bool {
	if c.user == nil {
		return false
	}
	if slices.Contains(c.user.GetGroups(), user.SystemPrivilegedGroup) {
		return true
	}
	return c.cred == credentialNode || c.cred == credentialComponent
}
