package auditlog

import (
	"encoding/json"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
)

// Redacting returns sink writing every event through Redact. Capped keeps
// request and response bodies of credential-carrying requests out of the
// log; Redacting keeps out the rest of what such a request's event could
// quote of its objects: text that admission policies write from them
// (auditAnnotations, messageExpression) and error messages. Redacting(nil)
// is nil.
func Redacting(sink audit.Sink) audit.Sink {
	if sink == nil {
		return nil
	}
	if r, ok := sink.(redacting); ok {
		return r
	}
	return redacting{sink}
}

type redacting struct{ audit.Sink }

func (r redacting) ProcessEvents(events ...*auditinternal.Event) bool {
	var out []*auditinternal.Event // nil until an event needs redacting
	for i, ev := range events {
		red := Redact(ev)
		if red == ev {
			continue
		}
		if out == nil {
			out = append([]*auditinternal.Event(nil), events...)
		}
		out[i] = red
	}
	if out == nil {
		return r.Sink.ProcessEvents(events...)
	}
	return r.Sink.ProcessEvents(out...)
}

// WithheldMessage replaces the message of a credential-carrying request's
// response status in its event. The client still gets the message, as
// kube's clients do; only the log does not keep it.
const WithheldMessage = "message not recorded: the request carries credentials"

// failureAnnotation is kube's record of the Audit action of a
// ValidatingAdmissionPolicy binding: a JSON list whose entries carry the
// failed validation's message.
const failureAnnotation = "validation.policy.admission.k8s.io/validation_failure"

// serverAnnotations are the annotation keys (or, ending in "/", key
// prefixes) the server itself writes from nothing a request carries: the
// authorisation decision and RBAC's reason (names of roles and bindings),
// the deprecation of the version served, and kube's latency breakdown.
// Every other key on a credential-carrying request's event is dropped: a
// ValidatingAdmissionPolicy's auditAnnotations are keyed
// "<policy>/<key>" and valued by an expression over the object.
var serverAnnotations = []string{"authorization.k8s.io/", "k8s.io/deprecated", "k8s.io/removed-release", "apiserver.latency.k8s.io/"}

// Redact returns ev unchanged unless it records a request that carries
// credentials (CarriesCredentials: Secrets, TokenRequest, TokenReview).
// For those it returns a copy without anything that can quote the
// request's or the stored objects' contents, whatever the policy or an
// admission policy says:
//
//   - no request or response object (Capped already keeps them out; this
//     holds even for a sink handed an uncapped event);
//   - only serverAnnotations; kube's validation_failure record keeps its
//     policy, binding, expression index and actions, without the message;
//   - the response status keeps its code, status, reason and the object's
//     name and kind; its message becomes WithheldMessage and its causes,
//     which carry field errors' messages, are dropped.
//
// The event ev is never modified: kube's filters keep writing it in later
// stages.
func Redact(ev *auditinternal.Event) *auditinternal.Event {
	ref := ev.ObjectRef
	if ref == nil || !carriesCredentials(ref.APIGroup, ref.Resource, ref.Subresource) || clean(ev) {
		return ev
	}
	out := ev.DeepCopy()
	out.RequestObject, out.ResponseObject = nil, nil
	out.Annotations = redactAnnotations(ev.Annotations)
	out.ResponseStatus = redactStatus(ev.ResponseStatus)
	return out
}

// clean says whether Redact would change nothing of ev.
func clean(ev *auditinternal.Event) bool {
	if ev.RequestObject != nil || ev.ResponseObject != nil {
		return false
	}
	if st := ev.ResponseStatus; st != nil && (st.Message != "" || st.Details != nil && len(st.Details.Causes) > 0) {
		return false
	}
	for k := range ev.Annotations {
		if k == failureAnnotation || !serverAnnotation(k) {
			return false
		}
	}
	return true
}

func serverAnnotation(key string) bool {
	for _, p := range serverAnnotations {
		if key == p || strings.HasSuffix(p, "/") && strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// redactAnnotations keeps the serverAnnotations of in, and its
// validation_failure record without messages.
func redactAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	keep := func(k, v string) {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	for k, v := range in {
		switch {
		case k == failureAnnotation:
			if r, ok := withoutMessages(v); ok {
				keep(k, r)
			}
		case serverAnnotation(k):
			keep(k, v)
		}
	}
	return out
}

// withoutMessages is a validation_failure record with the "message" of
// each entry removed; false when it is not a list of JSON objects.
func withoutMessages(record string) (string, bool) {
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(record), &entries); err != nil {
		return "", false
	}
	for _, e := range entries {
		delete(e, "message")
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// redactStatus is st with its message withheld and its causes dropped.
func redactStatus(st *metav1.Status) *metav1.Status {
	if st == nil {
		return nil
	}
	out := st.DeepCopy()
	if out.Message != "" {
		out.Message = WithheldMessage
	}
	if out.Details != nil {
		out.Details.Causes = nil
	}
	return out
}
