package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/filters"

	"github.com/trustplane/trustplane/api/auditlog"
	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
)

// Audit. With Config.AuditSink and Config.AuditPolicy set (package
// auditlog builds them from kube-apiserver's flags), every request is
// recorded with kube's own filters, in kube's order:
//
//   - WithAuditInit, outside authentication and RequestInfo: the audit
//     context and the Audit-ID header (the client's, else a new one),
//     echoed in the response.
//   - WithFailedAuthenticationAudit on the 401 path: a request no
//     credential identifies is recorded (ResponseStarted), without a user.
//   - WithAudit after authentication and RequestInfo, before
//     impersonation: the event's user is the authenticated one, and kube's
//     impersonation filter adds impersonatedUser; authorisation adds its
//     decision annotations, the request metrics kube's k8s.io/deprecated
//     and k8s.io/removed-release (MonitorRequest), the handlers the
//     request and response objects (auditRequest, auditResponse).
//
// A request is recorded once, on the node its client talks to: a write a
// follower forwards to the leader is recorded by the follower, with the
// client's identity; the leader records nothing for it (forwardedHere,
// which only node certificates can make true). The follower does not
// decode what it forwards: it decodes the body and the leader's answer
// for its event (auditForwardedRequest, auditForwardedResponse), and adds
// the annotations the leader's admission gave the write, which the leader
// sends back in a header (withForwardedAnnotations).
//
// Every policy is applied Capped (auditlog.CarriesCredentials): Secrets,
// TokenRequest and TokenReview are recorded at Metadata at most, so no
// secret data, token or key is written at any level; and every sink is
// Redacting: such a request's event keeps no admission policy's
// annotations and no response message, which a policy's auditAnnotations
// or messageExpression could fill with the object's data (the client
// still gets the message, as in kube). Credentials in headers are never
// recorded (kube's events hold no headers; the failed authentication
// event names the method only, "bearer").
//
// A request max in flight refuses (429) is not recorded: that filter runs
// before bearer tokens are checked (limits.go), so no user is known yet.
//
// Without a sink the filters are not installed and the handlers test one
// bool: auditing costs nothing when it is off.

// setupAudit keeps the audit sink and capped policy, and builds the
// audited refusals authentication answers with.
func (s *Server) setupAudit() {
	s.auditSink, s.auditPolicy = auditlog.Redacting(s.cfg.AuditSink), auditlog.Capped(s.cfg.AuditPolicy)
	s.auditing = s.auditSink != nil && s.auditPolicy != nil
	if !s.auditing {
		return
	}
	s.failedAuthn = s.auditedRefusal(unauthorized)
	s.notVerifiable = s.auditedRefusal(authn.NotFresh)
}

// unauthorized is kube's answer to a request no credential identifies.
func unauthorized() *apierrors.StatusError { return apierrors.NewUnauthorized("Unauthorized") }

// auditedRefusal answers status, recorded as a failed authentication
// (kube records its 401 so; a token this node cannot verify now, its
// 503, is an attempt recorded the same way).
func (s *Server) auditedRefusal(status func() *apierrors.StatusError) http.Handler {
	return filters.WithFailedAuthenticationAudit(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.writeError(w, req, status())
	}), s.auditSink, s.auditPolicy)
}

// refuseAuthn answers status to a request whose credential identifies no
// one, through audited (auditedRefusal) when auditing is on.
func (s *Server) refuseAuthn(w http.ResponseWriter, req *http.Request, audited http.Handler, status func() *apierrors.StatusError) {
	if audited != nil {
		audited.ServeHTTP(w, req)
		return
	}
	s.writeError(w, req, status())
}

// unauthenticated answers 401 to a request no credential identifies.
func (s *Server) unauthenticated(w http.ResponseWriter, req *http.Request) {
	s.refuseAuthn(w, req, s.failedAuthn, unauthorized)
}

// tokenNotVerifiable answers 503 to a request whose token this node
// cannot verify now (authn.ErrNotFresh).
func (s *Server) tokenNotVerifiable(w http.ResponseWriter, req *http.Request) {
	s.refuseAuthn(w, req, s.notVerifiable, authn.NotFresh)
}

// withAuditInit is kube's WithAuditInit, except for a write another node
// forwarded here: that node records it, so it gets no event here, only a
// context that collects the annotations admission adds (a policy's Audit
// action and auditAnnotations), sent back with the answer
// (withForwardedAnnotations). A node that does not audit installs none of
// this (the nodes of a cluster share one audit configuration).
func (s *Server) withAuditInit(next http.Handler) http.Handler {
	if !s.auditing {
		return next
	}
	forwarded := withForwardedAnnotations(next)
	initialized := filters.WithAuditInit(next)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.forwardedHere(req) {
			forwarded.ServeHTTP(w, req)
			return
		}
		initialized.ServeHTTP(w, req)
	})
}

// headerAuditAnnotations carries the audit annotations of a forwarded
// write from the leader to the follower that forwarded it, as a JSON
// object. Only a node's answer to a node's forward is read for it, and the
// follower removes it before answering its client.
const headerAuditAnnotations = "X-Trustplane-Audit-Annotations"

// withForwardedAnnotations gives a forwarded write an audit context at
// Metadata, the level at which kube's admission audit wrapper hands over
// annotations, and sets headerAuditAnnotations from it as the answer's
// header is written. The context has no sink: nothing is recorded here.
func withForwardedAnnotations(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := audit.WithAuditContext(req.Context())
		ac := audit.AuditContextFrom(ctx)
		ac.RequestAuditConfig.Level = auditinternal.LevelMetadata
		ac.Event.Level = auditinternal.LevelMetadata
		next.ServeHTTP(&annotationsWriter{ResponseWriter: w, ac: ac}, req.WithContext(ctx))
	})
}

// annotationsWriter sets headerAuditAnnotations when the header is
// written: admission, which adds the annotations, is over by then.
type annotationsWriter struct {
	http.ResponseWriter
	ac      *audit.AuditContext
	written bool
}

func (a *annotationsWriter) WriteHeader(code int) {
	if !a.written {
		a.written = true
		if ann := a.ac.Event.Annotations; len(ann) > 0 {
			if b, err := json.Marshal(ann); err == nil {
				a.Header().Set(headerAuditAnnotations, string(b))
			}
		}
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *annotationsWriter) Write(b []byte) (int, error) {
	if !a.written {
		a.WriteHeader(http.StatusOK)
	}
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *annotationsWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// auditForwardedAnnotations adds the annotations the leader admitted a
// forwarded write with to this node's event, and drops the header, which
// is not the client's to see.
func (s *Server) auditForwardedAnnotations(req *http.Request, resp *http.Response) {
	v := resp.Header.Get(headerAuditAnnotations)
	resp.Header.Del(headerAuditAnnotations)
	if v == "" || !s.auditing {
		return
	}
	var ann map[string]string
	if err := json.Unmarshal([]byte(v), &ann); err != nil {
		return
	}
	audit.AddAuditAnnotationsMap(req.Context(), ann)
}

// withAudit is kube's WithAudit: it evaluates the policy and writes the
// events of each stage. A write forwarded here passes through: its audit
// context only collects annotations (withForwardedAnnotations).
func (s *Server) withAudit(next http.Handler) http.Handler {
	if !s.auditing {
		return next
	}
	audited := filters.WithAudit(next, s.auditSink, s.auditPolicy, isLongRunning)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.forwardedHere(req) {
			next.ServeHTTP(w, req)
			return
		}
		audited.ServeHTTP(w, req)
	})
}

// auditRequest records a decoded request object, as kube's create and
// update handlers do: at Metadata it completes the object reference, at
// Request and above it adds the object.
func (s *Server) auditRequest(req *http.Request, obj runtime.Object, gv schema.GroupVersion, gvr schema.GroupVersionResource, sub string) {
	if !s.auditing {
		return
	}
	audit.LogRequestObject(req.Context(), obj, gv, gvr, sub, registry.Codecs)
}

// auditPatch records a patch as the request object, as kube's patch
// handler does, when it is JSON (an apply patch may be YAML, which an
// Event's JSON line cannot embed).
func (s *Server) auditPatch(req *http.Request, patch []byte) {
	if !s.auditing {
		return
	}
	if ev := audit.AuditEventFrom(req.Context()); ev == nil || ev.Level.Less(auditinternal.LevelRequest) || !json.Valid(patch) {
		return
	}
	audit.LogRequestPatch(req.Context(), patch)
}

// auditResponse records a response object in version gv, as kube's
// response writer does (errors are recorded by responsewriters itself).
func (s *Server) auditResponse(req *http.Request, obj runtime.Object, gv schema.GroupVersion) {
	if !s.auditing {
		return
	}
	audit.LogResponseObject(req.Context(), obj, gv, registry.Codecs)
}

// auditsResponseBody says whether the request's event records the
// response object (RequestResponse), which a list written from cached
// encodings would not give it.
func (s *Server) auditsResponseBody(req *http.Request) bool {
	if !s.auditing {
		return false
	}
	ev := audit.AuditEventFrom(req.Context())
	return ev != nil && ev.Level.GreaterOrEqual(auditinternal.LevelRequestResponse)
}

// CloseNotify lets kube's response-writer decorators (WithAudit's) keep
// Flush, which watches need: they keep it only on a writer that has both.
func (t *trackingWriter) CloseNotify() <-chan bool {
	//nolint:staticcheck // SA1019: kube's decorators test for it.
	if cn, ok := t.ResponseWriter.(http.CloseNotifier); ok {
		return cn.CloseNotify()
	}
	return nil
}

// maxAuditedAnswer bounds the leader's answer a follower reads to record
// it; a larger one is relayed without being recorded.
const maxAuditedAnswer = 3 << 20

// auditForwardedRequest records, on the follower that forwards a write,
// its body as the request object, as the leader's handler would have: the
// object decoded in the version sent (JSON, YAML or protobuf), which also
// completes the object reference; a patch as it is, when it is JSON.
func (s *Server) auditForwardedRequest(req *http.Request, body []byte) {
	if !s.auditing {
		return
	}
	ev := audit.AuditEventFrom(req.Context())
	if ev == nil || ev.Level.Less(auditinternal.LevelMetadata) || len(body) == 0 {
		return
	}
	if req.Method == http.MethodPatch {
		s.auditPatch(req, body)
		return
	}
	obj, gvk, err := registry.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil || ev.ObjectRef == nil {
		return
	}
	gvr := schema.GroupVersionResource{Group: ev.ObjectRef.APIGroup, Version: ev.ObjectRef.APIVersion, Resource: ev.ObjectRef.Resource}
	audit.LogRequestObject(req.Context(), obj, gvk.GroupVersion(), gvr, ev.ObjectRef.Subresource, registry.Codecs)
}

// auditForwardedResponse records the leader's answer to a forwarded write
// as kube's LogResponseObject records an answer: a Status's fields from
// Metadata up, the object at RequestResponse. resp.Body still holds the
// whole answer afterwards.
func (s *Server) auditForwardedResponse(req *http.Request, resp *http.Response) {
	if !s.auditing {
		return
	}
	ev := audit.AuditEventFrom(req.Context())
	if ev == nil || ev.Level.Less(auditinternal.LevelMetadata) || resp.Header.Get("Content-Encoding") != "" {
		return
	}
	if resp.StatusCode < http.StatusMultipleChoices && ev.Level.Less(auditinternal.LevelRequestResponse) {
		return // a success below RequestResponse records no more than its code
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAuditedAnswer+1))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil || len(b) > maxAuditedAnswer {
		return
	}
	obj, gvk, err := registry.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return
	}
	audit.LogResponseObject(req.Context(), obj, gvk.GroupVersion(), registry.Codecs)
}
