package api

import (
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/authn"
)

// notCaughtUpMessage is the 503 of a request that a node outside the
// staleness bound could not catch up for (withCaughtUp).
const notCaughtUpMessage = "this apiserver has not caught up with the cluster's leader and cannot authenticate or authorise requests from its own state; retry against another server"

// notCaughtUp is that 503, with Retry-After, as a resourceVersion=0 read
// there is refused: a refusal to answer, not a verdict on the caller.
func notCaughtUp() *apierrors.StatusError { return retryLater(notCaughtUpMessage) }

// retryLater is the API's 503 for a request this node cannot serve now
// but might in a moment, or another node might: Retry-After 1, which
// client-go honours by sending it again.
func retryLater(msg string) *apierrors.StatusError {
	e := apierrors.NewServiceUnavailable(msg)
	e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return e
}

// answeredWhileStale are the GET paths a node outside the staleness bound
// answers from its own state without catching up, besides its health
// probes and profiles (pprofPrefix): its version, metrics, and its Raft and
// membership status. They hold nothing secret, and they are how an
// operator (and the chaos monitor, chaos/monitor.go) sees that a node is
// cut off, which is when it cannot catch up, or why it is stuck. Their
// callers are authenticated and authorised with the state the node has
// (SECURITY.md, attacker (e)), so a request that impersonates someone is
// not among them: the impersonation rights would be the node's old ones.
var answeredWhileStale = map[string]bool{"/version": true, metricsPath: true, raftPath: true, membersPath: true}

// pprofPrefix is where the node's profiles are served (servePprof).
const pprofPrefix = "/debug/pprof/"

func servedWhileStale(req *http.Request) bool {
	return req.Method == http.MethodGet && (answeredWhileStale[req.URL.Path] || strings.HasPrefix(req.URL.Path, pprofPrefix)) && !impersonates(req)
}

// impersonates reports whether req carries any of kube's impersonation
// headers (Impersonate-User, -Group, -Uid, -Extra-*).
func impersonates(req *http.Request) bool {
	for k := range req.Header {
		if strings.HasPrefix(k, "Impersonate-") {
			return true
		}
	}
	return false
}

// withCaughtUp keeps the staleness rule (--max-stale-read, LocalStateFresh)
// for who a caller is and what it may do. A node cut off from the leader,
// or restarted from an old snapshot, holds the client CAs, signing keys,
// RBAC objects and ServiceAccounts it applied last: without this rule it
// would accept a client certificate of a CA rotated out since, or
// authorise (and answer an access review) with a binding deleted since.
// So on a node outside the bound a request that carries a credential, or
// that the anonymous rules would take, first waits for a catch-up
// that starts after it arrived (Config.CatchUp, which also settles the
// node's CA trust): then the TLS chains are asked again what caller they
// prove (tlsCaller), and tokens and authorisation see the state as caught
// up too. A node that cannot catch up answers 503 (notCaughtUp), audited
// as a failed authentication.
//
// It runs after max in flight, so each wait holds a slot, and before the
// bearer token is verified; system:masters, which max in flight lets past
// a full table (as kube's does), is bounded here instead: at most as many
// requests as max in flight allows wait at once (catchUpBound), and any
// more are refused at once. What holds no slot does not wait: the health
// probes are answered, a watch is refused (a stale node serves none, and
// one let through could be served by then, authorised with the old
// state), and so is any other long-running request (the snapshot
// stream). A request with no credential that no anonymous rule takes is
// refused 401 without waiting: no state decides that. Within the bound it
// costs one staleness test.
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
		info, _ := genericapirequest.RequestInfoFrom(req.Context())
		switch {
		case isHealthProbe(req.URL.Path):
			next.ServeHTTP(w, req)
			return
		case info != nil && info.Verb == "watch":
			s.refuseStale(w, req, s.staleWatch)
			return
		case isLongRunning(req, info):
			s.refuseStale(w, req, notCaughtUp)
			return
		case !identified && len(req.Header.Values("Authorization")) == 0 && !s.anonymousFor(req):
			next.ServeHTTP(w, req)
			return
		}
		if !s.startCatchUp() {
			s.refuseStale(w, req, notCaughtUp)
			return
		}
		err := s.cfg.CatchUp(req.Context())
		s.endCatchUp()
		if err != nil {
			// The catch-up's error (a deadline, no leader) tells the
			// client nothing it can act on beyond the 503.
			s.log.Debug("request refused: this node is outside --max-stale-read and cannot catch up", "path", req.URL.Path, "error", err)
			s.refuseStale(w, req, notCaughtUp)
			return
		}
		if identified && !s.stillProves(req, c) {
			s.unauthenticated(w, req)
			return
		}
		next.ServeHTTP(w, req.WithContext(authn.WithCaughtUp(req.Context())))
	})
}

// catchUpBound is the table of requests that may wait for a catch-up at
// once: as many as max in flight admits (both kinds), nil when it admits
// any number.
func catchUpBound(cfg *Config) chan struct{} {
	n := cfg.MaxRequestsInFlight + cfg.MaxMutatingRequestsInFlight
	if cfg.MaxRequestsInFlight <= 0 || cfg.MaxMutatingRequestsInFlight <= 0 {
		return nil
	}
	return make(chan struct{}, n)
}

func (s *Server) startCatchUp() bool {
	if s.catchingUp == nil {
		return true
	}
	select {
	case s.catchingUp <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Server) endCatchUp() {
	if s.catchingUp != nil {
		<-s.catchingUp
	}
}

// refuseStale answers status to a request a node outside the staleness
// bound will not take now, audited as the other refusals before
// authentication are (a failed authentication: nobody was identified).
func (s *Server) refuseStale(w http.ResponseWriter, req *http.Request, status func() *apierrors.StatusError) {
	var audited http.Handler
	if s.auditing {
		audited = s.auditedRefusal(status)
	}
	s.refuseAuthn(w, req, audited, status)
}

// stillProves reports whether req's TLS chains prove, as of now
// (tlsCaller), the caller they proved when it arrived.
func (s *Server) stillProves(req *http.Request, was caller) bool {
	u, cred, _, err := s.tlsCaller(req)
	return err == nil && u != nil && cred == was.cred && u.GetName() == was.name()
}
