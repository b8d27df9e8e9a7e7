package api

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// notCaughtUpMessage is the 503 of a request that a node outside the
// staleness bound could not catch up for (withCaughtUp).
const notCaughtUpMessage = "this apiserver has not caught up with the cluster's leader and cannot authenticate or authorise requests from its own state; retry against another server"

// notCaughtUp is that 503, with Retry-After, as a resourceVersion=0 read
// there is refused: a refusal to answer, not a verdict on the caller.
func notCaughtUp() *apierrors.StatusError {
	e := apierrors.NewServiceUnavailable(notCaughtUpMessage)
	e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return e
}

// answeredWhileStale are the GET paths a node outside the staleness bound
// answers from its own state without catching up: its health, version,
// metrics, and its Raft and membership status. They hold nothing secret,
// and they are how an operator (and the chaos monitor, chaos/monitor.go)
// sees that a node is cut off, which is when it cannot catch up. Their
// callers are authenticated and authorised with the state the node has
// (SECURITY.md, attacker (e)).
var answeredWhileStale = map[string]bool{metricsPath: true, raftPath: true, membersPath: true}

func servedWhileStale(req *http.Request) bool {
	return req.Method == http.MethodGet && (answeredWhileStale[req.URL.Path] || isPublic(req.URL.Path))
}

// withCaughtUp keeps the staleness rule (--max-stale-read, LocalStateFresh)
// for who a caller is and what it may do. A node cut off from the leader,
// or restarted from an old snapshot, holds the client CAs, signing keys,
// RBAC objects and ServiceAccounts it applied last: without this rule it
// would accept a client certificate of a CA rotated out since, or
// authorise (and answer an access review) with a binding deleted since.
// So on a node outside the bound every request that carries a credential,
// or that the anonymous authenticator would take, first waits for a
// catch-up that starts after it arrived (Config.CatchUp): then the
// certificate TLS proved is checked again against the client CAs as
// caught up (stillTrusted), and tokens and authorisation see the state as
// caught up too. A node that cannot catch up answers 503 (notCaughtUp),
// audited as a failed authentication. A request with no credential that
// nothing would take is refused 401 without waiting: no state decides
// that.
//
// It runs after max in flight, so each wait holds a slot, and before the
// bearer token is verified. Within the bound it costs one staleness test.
func (s *Server) withCaughtUp(next http.Handler) http.Handler {
	if s.cfg.CatchUp == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if LocalStateFresh(s.cfg.Membership, s.cfg.MaxStaleRead) || servedWhileStale(req) {
			next.ServeHTTP(w, req)
			return
		}
		c, identified := callerFrom(req.Context())
		if !identified && len(req.Header.Values("Authorization")) == 0 && s.cfg.Anonymous == nil {
			next.ServeHTTP(w, req)
			return
		}
		if err := s.cfg.CatchUp(req.Context()); err != nil {
			// The catch-up's error (a deadline, no leader) tells the
			// client nothing it can act on beyond the 503.
			s.log.Debug("request refused: this node is outside --max-stale-read and cannot catch up", "path", req.URL.Path, "error", err)
			s.refuseAuthn(w, req, s.notCaughtUp, notCaughtUp)
			return
		}
		if identified && !s.stillProves(req, c) {
			s.unauthenticated(w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// stillProves reports whether req's TLS chains prove, as of now
// (tlsCaller), the caller they proved when it arrived.
func (s *Server) stillProves(req *http.Request, was caller) bool {
	u, cred, _, err := s.tlsCaller(req)
	return err == nil && u != nil && cred == was.cred && u.GetName() == was.name()
}
