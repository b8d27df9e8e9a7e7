package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/healthz"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/apply"
	"github.com/trustplane/trustplane/internal/connlimit"
)

// Config configures the API server. cmd/trustplane fills it from flags.
type Config struct {
	// Listen is the host:port of the HTTPS listener.
	Listen string
	// TLS carries the serving certificate and the client CA pool used to
	// authenticate client certificates.
	TLS *tls.Config
	// ClientCAs, when set, is the client CA pool of the moment, which
	// replaces TLS.ClientCAs for each handshake: the pool changes live
	// when a CA rotates. It returns the same pool until it changes, so
	// the server derives a configuration once per pool.
	ClientCAs func() *x509.CertPool
	// MaxRequestBodyBytes bounds request bodies (kube-apiserver: 3 MiB).
	MaxRequestBodyBytes int64
	// LivezChecks and ReadyzChecks back /livez and /readyz; /healthz runs both.
	LivezChecks  []healthz.HealthChecker
	ReadyzChecks []healthz.HealthChecker
	Logger       *slog.Logger
	// Forward, when set, sends writes received while this node is not the
	// leader to the leader's API. A one-node cluster leaves it nil.
	Forward *ForwardConfig
	// Membership backs the operator members endpoint; nil answers 503.
	Membership Membership
	// MaxStaleRead bounds how old the local state that answers
	// resourceVersion=0 reads and watches may be: a node that has not
	// heard from a leader for longer serves them no more (members.go).
	// 0 disables the bound.
	MaxStaleRead time.Duration
	// CatchUp waits until this node has applied everything the leader had
	// committed when it was called, or fails (no leader, a deadline). A
	// node outside MaxStaleRead calls it before it authenticates or
	// authorises a request from its own state (withCaughtUp). nil: the
	// node's state is never stale (one node), and nothing waits.
	CatchUp func(ctx context.Context) error
	// Authenticator identifies a caller that presents no client
	// certificate from the cluster CA (bearer tokens). nil accepts client
	// certificates only.
	Authenticator authenticator.Request
	// Anonymous, when set, is kube's anonymous authenticator
	// (AuthenticationConfiguration's anonymous section): a request with no
	// credential it accepts is system:anonymous, authorised like any
	// other. nil: only the public health and version paths are served
	// without a credential.
	Anonymous authenticator.Request
	// Paths adds GET handlers for non-resource paths (OIDC discovery). They
	// go through authentication and authorisation like every request.
	Paths map[string]http.Handler
	// Posts adds POST handlers for non-resource paths that any node
	// answers itself (they write nothing), authorised like every request:
	// RBAC's "post" on the path, then whatever the handler checks (the
	// external JWT signer's endpoint).
	Posts map[string]http.Handler
	// Actions adds POST handlers for operator actions (signing-key
	// rotation). Only system:masters may call them, and a follower forwards
	// them to the leader, which must run them.
	Actions map[string]http.Handler
	// Authorizer decides every authenticated request and impersonation.
	// nil allows everything an authenticated caller asks.
	Authorizer authorizer.Authorizer
	// Nodes says which client certificates are peer nodes, the only
	// callers whose X-Remote-* identity headers are believed. nil trusts
	// no caller's headers.
	Nodes NodeIdentifier

	// Overload protection (limits.go); 0 disables a bound.
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the
	// read-only and mutating requests running at once (kube: 400, 200).
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
	// RequestTimeout bounds a request that is not long-running, and the
	// reading of its body (kube: 60s).
	RequestTimeout time.Duration
	// MaxWatches bounds the watches running at once on this node; a tenth
	// of it is kept for system identities (limits.go, systemCaller).
	// MaxWatchesPerUser bounds the watches one caller that is not a system
	// identity may run on this node.
	MaxWatches        int
	MaxWatchesPerUser int
	// Components reports whether a verified client-certificate chain
	// ending at anchor is one of this node's own components' (loopback
	// clients, controllers): their certificates come from a CA that
	// exists in this process only. They are system identities for the
	// watch cap (systemCaller); nil: none.
	Components func(anchor *x509.Certificate) bool
	// MaxPendingConnections bounds the connections in their TLS handshake
	// or before their first request (package connlimit: a full table drops
	// its oldest, never the newest); HandshakeTimeout is how long each may
	// take, and FirstByteTimeout how long it may take to send its first
	// byte (the ClientHello). MaxPendingConnectionsPerSource is one client
	// address's share of the table (0: connlimit.DefaultPerSource, an
	// eighth). ReadHeaderTimeout bounds the headers of every request.
	MaxPendingConnections          int
	MaxPendingConnectionsPerSource int
	HandshakeTimeout               time.Duration
	FirstByteTimeout               time.Duration
	ReadHeaderTimeout              time.Duration
	// JSONPatchMaxCopyBytes bounds the total size JSON patch "copy"
	// operations may add (kube: 3 MiB). It is process-wide, as in kube.
	JSONPatchMaxCopyBytes int64

	// Collectors are this node's own metrics (raft's), served at /metrics
	// beside kube's process-wide registry and the watch cache's figures
	// (metrics.go). Each must report this node only.
	Collectors []prometheus.Collector

	// AuditSink and AuditPolicy record requests in the audit log
	// (audit.go; package auditlog builds both from kube-apiserver's
	// flags). The policy is applied capped: requests that carry a
	// credential are recorded at Metadata at most. Either nil: no
	// auditing, and nothing added to the request path.
	AuditSink   audit.Sink
	AuditPolicy audit.PolicyRuleEvaluator

	// NoWatchList refuses sendInitialEvents watches (streaming lists) with
	// kube's 422, as kube-apiserver does without its WatchList feature gate.
	NoWatchList bool
}

// NodeIdentifier tells peer nodes from every other client.
type NodeIdentifier interface {
	// NodeName returns the node that verified TLS chains prove, or an
	// error when they prove none. It must trust only the node CA: a
	// certificate from the cluster CA or a signer's CA, whatever its
	// subject says, is not a node, because API users can obtain those.
	NodeName(verifiedChains [][]*x509.Certificate) (string, error)
}

// DefaultConfig returns kube-apiserver's defaults.
func DefaultConfig() *Config {
	return &Config{
		Listen: "127.0.0.1:6443", MaxRequestBodyBytes: 3 << 20, Logger: slog.Default(),
		MaxRequestsInFlight: 400, MaxMutatingRequestsInFlight: 200, RequestTimeout: 60 * time.Second,
		MaxWatches: 10000, MaxWatchesPerUser: 500, MaxPendingConnections: 1024, HandshakeTimeout: 10 * time.Second,
		FirstByteTimeout: 2 * time.Second, ReadHeaderTimeout: 32 * time.Second, JSONPatchMaxCopyBytes: 3 << 20,
	}
}

// Validate reports a configuration the server cannot run with.
func (c *Config) Validate() error {
	if c.TLS == nil || len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		return errors.New("api: a TLS serving certificate is required")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("api: listen address %q: %w", c.Listen, err)
	}
	if c.MaxRequestBodyBytes <= 0 {
		return errors.New("api: MaxRequestBodyBytes must be positive")
	}
	if c.MaxRequestsInFlight < 0 || c.MaxMutatingRequestsInFlight < 0 || c.MaxWatches < 0 || c.MaxWatchesPerUser < 0 || c.MaxPendingConnections < 0 ||
		c.RequestTimeout < 0 || c.HandshakeTimeout < 0 || c.ReadHeaderTimeout < 0 || c.JSONPatchMaxCopyBytes < 0 ||
		c.MaxPendingConnectionsPerSource < 0 || c.FirstByteTimeout < 0 {
		return errors.New("api: limits and timeouts must not be negative")
	}
	if c.MaxPendingConnections > 0 && c.HandshakeTimeout == 0 {
		return errors.New("api: MaxPendingConnections needs a positive HandshakeTimeout")
	}
	if f := c.Forward; f != nil && (f.Leadership == nil || f.TLS == nil || f.WaitForLeader <= 0) {
		return errors.New("api: forwarding needs Leadership, TLS and a positive WaitForLeader")
	}
	return nil
}

// Server serves the Kubernetes-compatible API over HTTPS.
type Server struct {
	cfg       *Config
	reg       *registry.Registry
	log       *slog.Logger
	infos     *genericapirequest.RequestInfoFactory
	openapi   *openAPIV3
	openapiV2 *openAPIV2
	fields    fieldManagers // managedFields and server-side apply (fieldmanager.go)
	discovery discoveryHandlers
	// events holds recently encoded watch events, shared between the
	// watchers of one change (watchshare.go).
	events sharedEvents
	// routes are the served routes the request metrics record; metrics
	// serves /metrics; objects feeds apiserver_storage_objects
	// (metrics.go).
	routes   map[routeKey]metricRoute
	metrics  http.Handler
	objects  *objectCounter
	handler  http.Handler
	http     *http.Server
	listener net.Listener
	// pending is the table of connections before their first request
	// (connlimit); nil when MaxPendingConnections is 0.
	pending *connlimit.Limiter
	// stopping is closed when Shutdown starts; long-running requests
	// (watches) end on it.
	stopping     chan struct{}
	stoppingOnce sync.Once

	// auditing is on when both the sink and the (capped) policy are set;
	// failedAuthn is then the audited 401, notVerifiable the audited 503
	// of a token this node cannot verify now (audit.go).
	auditSink     audit.Sink
	auditPolicy   audit.PolicyRuleEvaluator
	auditing      bool
	failedAuthn   http.Handler
	notVerifiable http.Handler

	// catchingUp bounds the requests waiting for a catch-up at once
	// (withCaughtUp); nil: no bound.
	catchingUp chan struct{}
}

// New builds the server over reg. It does not listen yet.
func New(cfg *Config, reg *registry.Registry) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		cfg: cfg, reg: reg, log: log, stopping: make(chan struct{}),
		infos: &genericapirequest.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
		catchingUp: catchUpBound(cfg),
	}
	oapi, err := newOpenAPIV3(reg.Stores(), reg.Virtuals())
	if err != nil {
		return nil, err
	}
	s.openapi = oapi
	if s.openapiV2, err = newOpenAPIV2(reg.Stores(), reg.Virtuals()); err != nil {
		return nil, err
	}
	if s.fields, err = newFieldManagers(reg.Stores()); err != nil {
		return nil, err
	}
	if s.discovery, err = s.newDiscoveryHandlers(); err != nil {
		return nil, err
	}
	apply.SetJSONPatchMaxCopyBytes(cfg.JSONPatchMaxCopyBytes)
	if cfg.MaxPendingConnections > 0 {
		if s.pending, err = connlimit.New(connlimit.Config{
			Name: "api", Max: cfg.MaxPendingConnections, PerSource: cfg.MaxPendingConnectionsPerSource,
			FirstByteTimeout: cfg.FirstByteTimeout, Timeout: cfg.HandshakeTimeout, Logger: log,
		}); err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
	}
	s.routes = metricRoutes(reg)
	if s.metrics, err = s.newMetricsHandler(); err != nil {
		return nil, err
	}
	s.setupAudit()
	s.handler = s.buildHandler()
	return s, nil
}

// Handler is the whole filter chain and router, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) buildHandler() http.Handler {
	r := httprouter.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = false
	r.NotFound = http.HandlerFunc(pageNotFound)

	health := http.NewServeMux()
	healthz.InstallLivezHandler(health, s.cfg.LivezChecks...)
	healthz.InstallReadyzHandler(health, s.cfg.ReadyzChecks...)
	healthz.InstallHandler(health, withoutCheck("shutdown", uniqueChecks(s.cfg.LivezChecks, s.cfg.ReadyzChecks))...)
	for _, p := range []string{"/livez", "/readyz", "/healthz"} {
		r.Handler(http.MethodGet, p, health)
		r.Handler(http.MethodGet, p+"/*check", health)
	}
	r.HandlerFunc(http.MethodGet, "/version", s.serveVersion)
	r.HandlerFunc(http.MethodGet, metricsPath, s.serveMetrics)
	r.Handler(http.MethodGet, "/openapi/v2", s.openapiV2)
	r.HandlerFunc(http.MethodGet, "/openapi/v3", s.serveOpenAPIV3)
	r.HandlerFunc(http.MethodGet, "/openapi/v3/*path", s.serveOpenAPIV3)
	r.Handler(http.MethodGet, pprofPrefix+"*profile", s.onlyMasters(http.HandlerFunc(servePprof)))
	r.Handler(http.MethodGet, membersPath, s.onlyMasters(http.HandlerFunc(s.serveMembers)))
	r.Handler(http.MethodDelete, membersPath+"/:name", s.onlyMasters(http.HandlerFunc(s.serveMembers)))
	r.Handler(http.MethodGet, raftPath, s.onlyMasters(http.HandlerFunc(s.serveRaftStatus)))
	r.Handler(http.MethodGet, snapshotPath, s.onlyMasters(http.HandlerFunc(s.serveSnapshot)))
	for p, h := range s.cfg.Paths {
		r.Handler(http.MethodGet, p, h)
	}
	for p, h := range s.cfg.Posts {
		r.Handler(http.MethodPost, p, h)
	}
	for p, h := range s.cfg.Actions {
		r.Handler(http.MethodPost, p, s.onlyMasters(h))
	}
	r.HandlerFunc(http.MethodGet, "/api", s.serveAPIVersions)
	r.HandlerFunc(http.MethodGet, "/apis", s.serveAPIGroupList)
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		r.HandlerFunc(m, "/api/*path", s.serveResource)
		r.HandlerFunc(m, "/apis/*path", s.serveResource)
	}

	var h http.Handler = r
	h = filters.WithWarningRecorder(h)
	h = s.withForwarding(h)
	h = s.withLimits(h)
	h = s.withRequestMetrics(h)
	if s.cfg.Authorizer != nil {
		// Authorisation sees the effective (impersonated) user; kube's
		// filters give the 403 Status bodies their exact wording.
		h = s.withAuthorization(h)
		h = filters.WithImpersonation(h, s.cfg.Authorizer, registry.Codecs)
	}
	h = withGrownStack(h)
	h = s.withAudit(h)
	// Authentication in two steps around max in flight (withInFlightLimit):
	// what TLS proved costs nothing and tells the limit who
	// system:masters is; a bearer token is checked holding a slot. On a
	// node outside the staleness bound both wait for a catch-up first
	// (withCaughtUp), also holding a slot.
	h = s.withTokenAuthentication(h)
	h = s.withCaughtUp(h)
	h = s.withInFlightLimit(h)
	h = s.withTLSAuthentication(h)
	h = filters.WithRequestInfo(h, s.infos)
	h = s.withAuditInit(h)
	h = s.withRecovery(h)
	return h
}

// withoutCheck drops the check named name. /healthz leaves out readyz's
// "shutdown" check, as kube-apiserver's does: during the shutdown delay
// only /readyz fails.
func withoutCheck(name string, checks []healthz.HealthChecker) []healthz.HealthChecker {
	out := checks[:0:0]
	for _, c := range checks {
		if c.Name() != name {
			out = append(out, c)
		}
	}
	return out
}

// uniqueChecks joins check lists, keeping the first check of each name:
// /healthz runs the liveness and readiness checks once each.
func uniqueChecks(lists ...[]healthz.HealthChecker) []healthz.HealthChecker {
	seen := map[string]bool{}
	var out []healthz.HealthChecker
	for _, l := range lists {
		for _, c := range l {
			if !seen[c.Name()] {
				seen[c.Name()] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// publicPaths may be read without credentials, as kube's
// system:public-info-viewer role allows.
var publicPaths = map[string]bool{"/livez": true, "/readyz": true, "/healthz": true, "/version": true}

func isPublic(path string) bool {
	if publicPaths[path] {
		return true
	}
	for p := range publicPaths {
		if p != "/version" && len(path) > len(p) && path[:len(p)+1] == p+"/" {
			return true
		}
	}
	return false
}

// withTLSAuthentication identifies the callers the TLS handshake proved:
// a peer node forwarding its client's request (the client's identity in
// X-Remote-* headers, believed from node certificates only), and a client
// certificate from the client CAs (CN = user, O = groups). It costs
// nothing per request, so it runs before max in flight, which then knows
// system:masters. Any other request goes on without a user, to
// withTokenAuthentication.
func (s *Server) withTLSAuthentication(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, cred, fromHeaders, err := s.tlsCaller(req)
		switch {
		case err != nil:
			s.writeError(w, req, err)
		case u == nil:
			next.ServeHTTP(w, req)
		default:
			if !fromHeaders {
				// The certificate identifies its caller: a token beside
				// it is spent unread.
				req.Header.Del("Authorization")
			}
			next.ServeHTTP(w, req.WithContext(withCaller(req.Context(), u, cred)))
		}
	})
}

// tlsCaller is the caller req's verified TLS chains prove as of now
// (withTLSAuthentication), nil when they prove none; fromHeaders says it
// is a peer node's client, named in X-Remote-* headers. It is asked again
// once a stale node has caught up (withCaughtUp), so that an identity
// proved by a CA rotated out meanwhile is not kept.
func (s *Server) tlsCaller(req *http.Request) (u user.Info, cred credential, fromHeaders bool, err error) {
	node := s.fromNode(req)
	if node {
		if v := req.Header.Get(headerForwardedBy); v != "" {
			if err := readsForwarded(v); err != nil {
				return nil, 0, false, err
			}
		}
		if u, ok := identityFromHeaders(req.Header); ok {
			cred := credentialForwarded
			if req.Header.Get(headerForwardedCaller) == forwardedComponent {
				cred = credentialComponent
			}
			return u, cred, true, nil
		}
	}
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 || !s.stillTrusted(req.TLS.VerifiedChains) {
		return nil, 0, false, nil
	}
	leaf := req.TLS.VerifiedChains[0][0]
	groups := append(append([]string{}, leaf.Subject.Organization...), user.AllAuthenticated)
	cred = credentialCertificate
	switch chain := req.TLS.VerifiedChains[0]; {
	case node:
		cred = credentialNode
	case s.cfg.Components != nil && s.cfg.Components(chain[len(chain)-1]):
		cred = credentialComponent
	}
	return &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: groups}, cred, false, nil
}

// stillTrusted reports whether a chain the handshake verified still ends
// at a client CA of the moment (Config.ClientCAs): a connection made
// before a CA left the pool (a rotation's finish) must not keep the
// identity that CA gave it. The anchor is looked up in the pool, which
// costs a hash, not a signature. An anchor the pool no longer holds may
// still be there as another certificate of the same key and subject (a
// CA renewed with its key), which Go's chain building takes for the same
// certificate: then the certificate the anchor signed is verified under
// the pool, one signature, as a new handshake would verify it.
func (s *Server) stillTrusted(chains [][]*x509.Certificate) bool {
	if s.cfg.ClientCAs == nil {
		return true
	}
	pool := s.cfg.ClientCAs()
	anyUsage := []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
	for _, ch := range chains {
		anchor := ch[len(ch)-1]
		if _, err := anchor.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: anyUsage}); err == nil {
			return true
		}
		if len(ch) < 2 {
			continue
		}
		if _, err := ch[len(ch)-2].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: anyUsage}); err == nil {
			return true
		}
	}
	return false
}

// withTokenAuthentication identifies a caller withTLSAuthentication did
// not by a bearer token (Config.Authenticator). A request without one is
// system:anonymous where Config.Anonymous accepts it (anonymousFor) and on
// the public health and version paths; everything else gets 401, as does
// a token that does not authenticate, wherever it is sent (kube: a bad
// credential is never taken for none).
func (s *Server) withTokenAuthentication(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, ok := genericapirequest.UserFrom(req.Context()); ok {
			next.ServeHTTP(w, req)
			return
		}
		// Any Authorization header is a credential, even a first one left
		// empty: it is never taken for none.
		if s.cfg.Authenticator != nil && len(req.Header.Values("Authorization")) > 0 {
			resp, ok, err := s.cfg.Authenticator.AuthenticateRequest(req)
			if errors.Is(err, authn.ErrNotFresh) {
				// Not a verdict on the token: this node cannot give one
				// now (authn.NotFresh).
				s.log.Debug("authentication refused: this node cannot verify the cluster's tokens now", "path", req.URL.Path)
				s.tokenNotVerifiable(w, req)
				return
			}
			if err != nil || !ok {
				if err != nil {
					s.log.Debug("authentication failed", "path", req.URL.Path, "error", err)
				}
				s.unauthenticated(w, req)
				return
			}
			// The credential is spent here: it is never forwarded or logged.
			req.Header.Del("Authorization")
			next.ServeHTTP(w, req.WithContext(withCaller(req.Context(), withAuthenticatedGroup(resp.User), credentialToken)))
			return
		}
		if s.anonymousFor(req) || isPublic(req.URL.Path) {
			u := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
			next.ServeHTTP(w, req.WithContext(withCaller(req.Context(), u, credentialNone)))
			return
		}
		s.unauthenticated(w, req)
	})
}

// anonymousFor reports whether Config.Anonymous accepts req. kube's
// authenticator compares the decoded path with the configured ones; a
// path sent with escapes that decode differently (an encoded slash, an
// escaped letter) is refused here before it is asked, so that only the
// exact bytes an operator named are public: what the router and every
// proxy in front see is then the same path.
func (s *Server) anonymousFor(req *http.Request) bool {
	if s.cfg.Anonymous == nil || req.URL.RawPath != "" {
		return false
	}
	_, ok, err := s.cfg.Anonymous.AuthenticateRequest(req)
	return ok && err == nil
}

// withAuthenticatedGroup adds system:authenticated, which every
// authenticated user is in, as kube's authenticator union does.
func withAuthenticatedGroup(u user.Info) user.Info {
	for _, g := range u.GetGroups() {
		if g == user.AllAuthenticated {
			return u
		}
	}
	return &user.DefaultInfo{
		Name: u.GetName(), UID: u.GetUID(),
		Groups: append(append([]string{}, u.GetGroups()...), user.AllAuthenticated), Extra: u.GetExtra(),
	}
}

// withAuthorization asks the Authorizer about every request. The health and
// version paths are always readable, so probes and load balancers work
// before the bootstrap policy is written (kube's system:public-info-viewer
// grants the same to everyone).
func (s *Server) withAuthorization(next http.Handler) http.Handler {
	authorized := filters.WithAuthorization(next, s.cfg.Authorizer, registry.Codecs)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && isPublic(req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		authorized.ServeHTTP(w, req)
	})
}

// withRecovery turns a handler panic into a 500 Status and a logged stack,
// so that no request can take the node down.
func (s *Server) withRecovery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rw := &trackingWriter{ResponseWriter: w}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("panic serving request", "method", req.Method, "path", req.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if rw.status == 0 {
				s.writeError(rw, req, apierrors.NewInternalError(fmt.Errorf("an internal error occurred while serving the request")))
			}
		}()
		next.ServeHTTP(rw, req)
	})
}

// onlyMasters admits members of system:masters only. It guards the
// profiling endpoints until RBAC can express who may read them.
func (s *Server) onlyMasters(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, ok := genericapirequest.UserFrom(req.Context()); ok {
			for _, g := range u.GetGroups() {
				if g == user.SystemPrivilegedGroup {
					next.ServeHTTP(w, req)
					return
				}
			}
		}
		s.writeError(w, req, apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("only %s may read %s", user.SystemPrivilegedGroup, req.URL.Path)))
	})
}

// servePprof serves net/http/pprof under /debug/pprof/, as kube-apiserver does.
func servePprof(w http.ResponseWriter, req *http.Request) {
	switch name := strings.TrimPrefix(req.URL.Path, "/debug/pprof/"); name {
	case "":
		pprof.Index(w, req)
	case "cmdline":
		pprof.Cmdline(w, req)
	case "profile":
		pprof.Profile(w, req)
	case "symbol":
		pprof.Symbol(w, req)
	case "trace":
		pprof.Trace(w, req)
	default:
		pprof.Handler(name).ServeHTTP(w, req)
	}
}

// trackingWriter is the one wrapper of every response (withRecovery
// allocates it): it remembers the status sent, so recovery knows whether
// the response has started, and with the body's size it is what the
// request metrics record (withRequestMetrics).
type trackingWriter struct {
	http.ResponseWriter
	status int   // the first status sent; 0 until the response starts
	size   int64 // body bytes written
}

func (t *trackingWriter) WriteHeader(code int) {
	if t.status == 0 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if t.status == 0 {
		t.status = http.StatusOK
	}
	n, err := t.ResponseWriter.Write(b)
	t.size += int64(n)
	return n, err
}

// Flush lets streaming responses (watches) through the wrapper.
func (t *trackingWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		if t.status == 0 {
			t.status = http.StatusOK
		}
		f.Flush()
	}
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (s *Server) notFound(w http.ResponseWriter, req *http.Request) {
	s.writeError(w, req, apierrors.NewGenericServerResponse(http.StatusNotFound, req.Method, schema.GroupResource{}, "", "", 0, false))
}

// pageNotFound is kube-apiserver's answer to a path outside every API
// group it serves (an unknown group or top-level path): its mux's
// plain-text 404 (net/http's NotFoundHandler), not a Status. Under a
// served group (the core group always) go-restful has a web service, and
// its 404, for an unknown version or resource, is a Status (notFound).
func pageNotFound(w http.ResponseWriter, req *http.Request) { http.NotFound(w, req) }

// servesGroup says whether any stored or virtual resource is served in
// group, that is, whether kube-apiserver has a go-restful web service for
// it; the core group always has one (/api).
func (s *Server) servesGroup(group string) bool {
	if group == "" {
		return true
	}
	for _, st := range s.reg.Stores() {
		if st.GVR.Group == group {
			return true
		}
	}
	for _, v := range s.reg.Virtuals() {
		if v.GVR.Group == group {
			return true
		}
	}
	return false
}

// methodNotAllowed is kube-apiserver's answer (go-restful's, turned into a
// Status) to a method a served path has no route for.
func (s *Server) methodNotAllowed(w http.ResponseWriter, req *http.Request) {
	s.writeError(w, req, apierrors.NewGenericServerResponse(http.StatusMethodNotAllowed, "", schema.GroupResource{}, "", "", 0, false))
}

// Listen binds the listener; Serve serves on it. Splitting them lets the
// caller know the port is bound before it reports readiness.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Listen, err)
	}
	s.listener = ln
	return nil
}

// liveClientCAs is a GetConfigForClient that serves base with the client CA
// pool of the moment, deriving one configuration per pool.
func liveClientCAs(base *tls.Config, pool func() *x509.CertPool) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	type derived struct {
		pool *x509.CertPool
		cfg  *tls.Config
	}
	var last atomic.Pointer[derived]
	return func(*tls.ClientHelloInfo) (*tls.Config, error) {
		p := pool()
		if d := last.Load(); d != nil && d.pool == p {
			return d.cfg, nil
		}
		c := base.Clone()
		c.GetConfigForClient, c.ClientCAs = nil, p
		last.Store(&derived{pool: p, cfg: c})
		return c, nil
	}
}

// Addr is the bound address, after Listen.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Serve serves HTTPS until Shutdown.
func (s *Server) Serve() error {
	tlsCfg := s.cfg.TLS.Clone()
	tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	if s.cfg.ClientCAs != nil {
		tlsCfg.GetConfigForClient = liveClientCAs(tlsCfg, s.cfg.ClientCAs)
	}
	s.http = &http.Server{
		Handler:           s.handler,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.startMetrics()
	ln := s.listener
	if s.pending != nil {
		// A connection leaves the pending table once it is past its TLS
		// handshake and has sent its first request bytes (any state
		// after StateNew); a full table drops its oldest (limits.go).
		s.http.ConnState = func(c net.Conn, state http.ConnState) {
			if state != http.StateNew {
				connlimit.Established(c)
			}
		}
		ln = s.pending.Listener(ln)
	}
	err := s.http.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting requests and waits for in-flight ones until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stoppingOnce.Do(func() { close(s.stopping) })
	if s.http == nil {
		if s.listener != nil {
			return s.listener.Close()
		}
		return nil
	}
	return s.http.Shutdown(ctx)
}
