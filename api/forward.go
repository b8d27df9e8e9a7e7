package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/dialsrc"
)

// Leadership is what write forwarding needs from the cluster.
type Leadership interface {
	// IsLeader reports whether this node leads now. A stale true is
	// harmless: the write then fails its proposal with a retryable error.
	IsLeader() bool
	// LeaderAPIAddr is the HTTPS address of the current leader's API, or an
	// error while no leader is known (during an election).
	LeaderAPIAddr() (string, error)
}

// ForwardConfig configures forwarding of writes from followers to the leader.
type ForwardConfig struct {
	Leadership Leadership
	// TLS is the node's client configuration towards other nodes' APIs: a
	// node certificate (so the leader trusts the X-Remote-* headers), and a
	// check that the answering API presents a node certificate too, so a
	// write and its caller's identity are never handed to a server that
	// merely holds a certificate from the cluster CA.
	TLS *tls.Config
	// WaitForLeader bounds how long a write waits for a leader during an
	// election before it is answered 503 with Retry-After.
	WaitForLeader time.Duration
	// ExecuteLocally runs resource writes on the node they arrive at
	// (--execute-writes=local) rather than forwarding them: the node's
	// storage then has the leader only order each write's command
	// (cluster.Node.Submit). The write reads this node's state, which
	// may trail the leader's; the storage layer makes that safe
	// (api/storage/reading.go): the fsm judges every proposal's
	// preconditions at its own index, and an answer made from the state
	// read alone is confirmed by a read index first.
	ExecuteLocally bool
	// Credentials, when set, names the certificate TLS presents now (the
	// node certificate, replaced when the node CA rotates). When it
	// changes the forwarder stops using connections made with the one
	// before: the leader decides who a connection is from its handshake,
	// and after a rotation's finish it no longer trusts the old one.
	Credentials func() any
}

// Headers carrying the caller's identity on a forwarded request. They are
// read only when the request comes from a node certificate.
const (
	headerRemoteUser  = "X-Remote-User"
	headerRemoteUID   = "X-Remote-Uid"
	headerRemoteGroup = "X-Remote-Group"
	headerRemoteExtra = "X-Remote-Extra-"
	headerForwardedBy = "X-Trustplane-Forwarded-By"
	// headerForwardedCaller, set to forwardedComponent, says the caller
	// is one of the forwarding node's components (FromComponent). A
	// node that does not read it takes the caller for an ordinary user,
	// which grants less, so it needs no new forwarded-request version.
	headerForwardedCaller = "X-Trustplane-Forwarded-Caller"
	forwardedComponent    = "component"
	forwardPollInterval   = 50 * time.Millisecond
)

// isWrite says whether a request writes a resource: the leader serves it,
// or, with ExecuteLocally, the node it arrives at.
func isWrite(info *genericapirequest.RequestInfo) bool {
	if !info.IsResourceRequest {
		return false
	}
	switch info.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// leaderOnly says whether a non-resource request must run on the leader,
// whatever ExecuteLocally says: it is the one rule for which writes need
// the leader's own state. Operator actions (signing-key, CA and keyring
// rotations) read and write internal records, which only the leader
// proposes (cluster.Node.Submit refuses them for other nodes); removing a
// member changes the raft configuration, which only the leader can.
// Controllers need no rule: they write through their node's API like any
// client.
func (s *Server) leaderOnly(req *http.Request) bool {
	switch req.Method {
	case http.MethodPost:
		return s.cfg.Actions[req.URL.Path] != nil
	case http.MethodDelete:
		return strings.HasPrefix(req.URL.Path, membersPath+"/")
	}
	return false
}

// storesNothing says whether a create goes to a virtual resource (reviews,
// TokenRequest): those write nothing, so any node answers them itself.
func (s *Server) storesNothing(info *genericapirequest.RequestInfo) bool {
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	return info.Verb == "create" && s.reg.Virtual(gvr, info.Subresource) != nil
}

// forwarder sends writes received by a follower to the leader.
type forwarder struct {
	cfg *ForwardConfig
	// clients is the client for the credentials of the moment.
	clients atomic.Pointer[credClient]
	listen  string
	log     *slog.Logger
}

// newForwarder builds the client that talks to the leader's API. Its
// connections start from listen's IP when dialsrc's rule allows (a
// specific IP of the leader's class), so the leader, and the chaos tool's
// fault proxies, see which node forwards.
func newForwarder(cfg *ForwardConfig, listen string) *forwarder {
	f := &forwarder{cfg: cfg, listen: listen}
	f.clients.Store(f.newClient(f.credentials()))
	return f
}

// credClient is an HTTP client whose connections present one credential.
type credClient struct {
	cred   any
	client *http.Client
}

func (f *forwarder) credentials() any {
	if f.cfg.Credentials == nil {
		return nil
	}
	return f.cfg.Credentials()
}

func (f *forwarder) newClient(cred any) *credClient {
	tr := &http.Transport{
		DialContext:         dialsrc.DialContext(f.listen, net.Dialer{}), // the zero Dialer, as http.Transport uses by default
		TLSClientConfig:     f.cfg.TLS.Clone(),
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	return &credClient{cred: cred, client: &http.Client{
		Transport: tr,
		// Redirects are the client's business, never the forwarder's.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// client is the client for the credentials of the moment: a new one, with
// new connections, once they changed; the old one's idle connections are
// closed, and requests in flight on it finish.
func (f *forwarder) client() *http.Client {
	cur := f.clients.Load()
	cred := f.credentials()
	if cred == cur.cred {
		return cur.client
	}
	next := f.newClient(cred)
	if f.clients.CompareAndSwap(cur, next) {
		cur.client.CloseIdleConnections()
		return next.client
	}
	return f.clients.Load().client
}

// leaderAddr waits until deadline for a leader: self when this node leads.
func (f *forwarder) leaderAddr(req *http.Request, deadline time.Time) (addr string, self bool, err error) {
	for {
		if f.cfg.Leadership.IsLeader() {
			return "", true, nil
		}
		addr, err = f.cfg.Leadership.LeaderAPIAddr()
		if err == nil && addr != "" {
			return addr, false, nil
		}
		if time.Now().After(deadline) {
			return "", false, fmt.Errorf("no leader was elected within %v", f.cfg.WaitForLeader)
		}
		select {
		case <-req.Context().Done():
			return "", false, req.Context().Err()
		case <-time.After(forwardPollInterval):
		}
	}
}

// noLeader is the answer to a write while the cluster has no leader.
func noLeader(err error) error {
	return retryLater(fmt.Sprintf("the cluster has no leader to accept writes: %v", err))
}

// notSent reports whether err shows the request never reached the leader
// (connection refused, TLS handshake failed: crypto/tls refused the chain,
// or the node verifier, which checks chains against the live node CAs,
// refused the peer), so it may be sent again.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var tlsErr *tls.CertificateVerificationError
	return errors.As(err, &tlsErr) || errors.Is(err, certs.ErrNotANode)
}

// withForwarding serves writes locally on the leader and sends them to the
// leader elsewhere, carrying the authenticated identity in X-Remote-*
// headers. While the leader is unknown or unreachable (an election after it
// died) it waits up to WaitForLeader, then answers 503 with Retry-After. A
// request that was already forwarded once is never forwarded again.
func (s *Server) withForwarding(next http.Handler) http.Handler {
	if s.cfg.Forward == nil || s.cfg.Forward.Leadership == nil {
		return next
	}
	f := newForwarder(s.cfg.Forward, s.cfg.Listen)
	f.log = s.log
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := genericapirequest.RequestInfoFrom(req.Context())
		if !ok || !(isWrite(info) || s.leaderOnly(req)) || s.storesNothing(info) || f.cfg.Leadership.IsLeader() {
			next.ServeHTTP(w, req)
			return
		}
		if f.cfg.ExecuteLocally && !s.leaderOnly(req) {
			next.ServeHTTP(w, req)
			return
		}
		// The body is kept so the request can be sent again if the first
		// attempt never reached a leader.
		body, err := s.readBody(req)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		s.auditForwardedRequest(req, body)
		u, _ := genericapirequest.UserFrom(req.Context())
		deadline := time.Now().Add(f.cfg.WaitForLeader)
		for {
			addr, self, err := f.leaderAddr(req, deadline)
			switch {
			case self:
				req.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(w, req)
				return
			case err != nil:
				s.writeError(w, req, noLeader(err))
				return
			case s.forwardedHere(req):
				// Leadership moved while the request was in flight:
				// answer instead of bouncing between nodes. Only a
				// node's word counts: a client that sends the header
				// itself is forwarded like any other client (send sets
				// the header anew).
				s.writeError(w, req, noLeader(errors.New("leadership changed while the request was forwarded")))
				return
			}
			fctx, cancel := context.WithCancelCause(req.Context())
			stop := f.watchLeader(fctx, cancel, addr)
			resp, err := f.send(req.WithContext(fctx), addr, body, u)
			stop()
			if err == nil {
				s.auditForwardedAnnotations(req, resp)
				s.auditForwardedResponse(req, resp)
				copyResponse(w, resp)
				cancel(nil)
				return
			}
			changed := errors.Is(context.Cause(fctx), errLeaderChanged)
			cancel(nil)
			if changed && !notSent(err) {
				s.log.Warn("leadership moved while a forwarded write was in flight", "leader", addr)
				s.writeError(w, req, apierrors.NewTimeoutError(
					fmt.Sprintf("leadership moved away from %s while the write was in flight; the write may or may not have been applied", addr), 0))
				return
			}
			if !notSent(err) {
				s.log.Warn("forwarded write got no answer", "leader", addr, "error", err)
				// No Retry-After: client-go would resend a write that may
				// have been applied.
				s.writeError(w, req, apierrors.NewTimeoutError(
					fmt.Sprintf("the leader at %s did not answer; the write may or may not have been applied: %v", addr, err), 0))
				return
			}
			if time.Now().After(deadline) {
				s.writeError(w, req, noLeader(err))
				return
			}
			select {
			case <-req.Context().Done():
				s.writeError(w, req, noLeader(req.Context().Err()))
				return
			case <-time.After(forwardPollInterval):
			}
		}
	})
}

// errLeaderChanged cancels a forwarded write whose leader another node
// has replaced.
var errLeaderChanged = errors.New("leadership moved while the write was in flight")

// watchLeader cancels a forward to addr as soon as this node knows another
// leader (or leads itself). A leader cut off by a partition steps down
// within its lease and a new one is elected within a second, but the
// connection to the old one may be silent rather than closed: without
// this the write would wait for the client's timeout, and every client
// of this node with it. The returned stop ends the watch; call it once
// the answer's headers are in.
func (f *forwarder) watchLeader(ctx context.Context, cancel context.CancelCauseFunc, addr string) (stop func()) {
	done := make(chan struct{})
	goRecovering(f.log, "forward: leader watch", func() {
		t := time.NewTicker(forwardPollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				if f.cfg.Leadership.IsLeader() {
					cancel(errLeaderChanged)
					return
				}
				if now, err := f.cfg.Leadership.LeaderAPIAddr(); err == nil && now != "" && now != addr {
					cancel(errLeaderChanged)
					return
				}
			}
		}
	})
	return func() { close(done) }
}

// send forwards req with body to the leader at addr.
func (f *forwarder) send(req *http.Request, addr string, body []byte, u user.Info) (*http.Response, error) {
	out, err := http.NewRequestWithContext(req.Context(), req.Method,
		(&url.URL{Scheme: "https", Host: addr, Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}).String(),
		bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range req.Header {
		if !hopByHop[http.CanonicalHeaderKey(k)] {
			out.Header[k] = vs
		}
	}
	setIdentityHeaders(out.Header, u)
	if FromComponent(req.Context()) {
		out.Header.Set(headerForwardedCaller, forwardedComponent)
	}
	out.Header.Set(headerForwardedBy, forwardedBy)
	return f.client().Do(out)
}

// hopByHop headers belong to one connection and are not forwarded.
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true,
}

// copyResponse relays the leader's answer to the client.
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if !hopByHop[http.CanonicalHeaderKey(k)] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// forwardedBy is the forwarded-by header's value this node writes: the
// version of the forwarded request (cluster.ForwardedVersion).
var forwardedBy = strconv.Itoa(cluster.ForwardedVersion)

// readsForwarded refuses a forwarded request of a version this node does
// not read: from a newer build, whose identity headers might mean what
// this one cannot know. Nothing is done for it. Every version so far is
// 1, and a build that changes the headers' meaning must bump it and send
// the new one only once every member reads it (cluster/formats.go).
func readsForwarded(value string) error {
	v, err := strconv.Atoi(value)
	if err == nil && v >= 1 && v <= cluster.ForwardedVersion {
		return nil
	}
	if len(value) > 16 || err != nil {
		value = "unknown"
	}
	return apierrors.NewServiceUnavailable(fmt.Sprintf(
		"the request was forwarded by a node in forwarded-request format version %s, and this node reads up to version %d (it runs an older trustplane: upgrade it)",
		value, cluster.ForwardedVersion))
}

// setIdentityHeaders replaces any client-sent identity headers with the
// authenticated user's.
func setIdentityHeaders(h http.Header, u user.Info) {
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Remote-") {
			delete(h, k)
		}
	}
	h.Del(headerForwardedCaller)
	h.Del("Authorization")
	h.Del("Impersonate-User")
	h.Del("Impersonate-Group")
	h.Del("Impersonate-Uid")
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Impersonate-Extra-") {
			delete(h, k)
		}
	}
	if u == nil {
		return
	}
	h.Set(headerRemoteUser, u.GetName())
	if uid := u.GetUID(); uid != "" {
		h.Set(headerRemoteUID, uid)
	}
	for _, g := range u.GetGroups() {
		h.Add(headerRemoteGroup, g)
	}
	for k, vs := range u.GetExtra() {
		for _, v := range vs {
			h.Add(headerRemoteExtra+url.PathEscape(k), v)
		}
	}
}

// identityFromHeaders reads a forwarded identity. ok is false when the
// request carries none.
func identityFromHeaders(h http.Header) (user.Info, bool) {
	name := h.Get(headerRemoteUser)
	if name == "" {
		return nil, false
	}
	u := &user.DefaultInfo{Name: name, UID: h.Get(headerRemoteUID), Groups: h.Values(headerRemoteGroup)}
	for k, vs := range h {
		if !strings.HasPrefix(k, headerRemoteExtra) {
			continue
		}
		key, err := url.PathUnescape(strings.ToLower(strings.TrimPrefix(k, headerRemoteExtra)))
		if err != nil {
			continue
		}
		if u.Extra == nil {
			u.Extra = map[string][]string{}
		}
		u.Extra[key] = append(u.Extra[key], vs...)
	}
	return u, true
}

// fromNode reports whether the request comes from a peer node's
// certificate, which alone may carry X-Remote-* identity headers.
func (s *Server) fromNode(req *http.Request) bool {
	if s.cfg.Nodes == nil || req.TLS == nil {
		return false
	}
	_, err := s.cfg.Nodes.NodeName(req.TLS.VerifiedChains)
	return err == nil
}
