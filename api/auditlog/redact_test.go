package auditlog

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
)

// TestRedact: an event of a request that carries credentials keeps nothing
// a policy or a message can quote of its objects; every other event is
// left as it is.
func TestRedact(t *testing.T) {
	ref := func(group, resource, sub string) *auditinternal.ObjectReference {
		return &auditinternal.ObjectReference{APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: sub, Namespace: "ns", Name: "x"}
	}
	leaky := func(r *auditinternal.ObjectReference) *auditinternal.Event {
		return &auditinternal.Event{
			Level: auditinternal.LevelMetadata, Stage: auditinternal.StageResponseComplete, ObjectRef: r,
			Annotations: map[string]string{
				"authorization.k8s.io/decision":                 "allow",
				"authorization.k8s.io/reason":                   `RBAC: allowed by ClusterRoleBinding "b"`,
				"k8s.io/deprecated":                             "true",
				"apiserver.latency.k8s.io/total":                "5ms",
				"quote-data/secret":                             "cGFzc3dvcmQ=",
				failureAnnotation:                               `[{"message":"password is cGFzc3dvcmQ=","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]`,
				"validation.policy.admission.k8s.io/whatever":   "cGFzc3dvcmQ=",
				"authorization.k8s.io.example.com/not-a-prefix": "cGFzc3dvcmQ=",
			},
			ResponseStatus: &metav1.Status{
				Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
				Message: `secrets "x" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: password is cGFzc3dvcmQ=`,
				Details: &metav1.StatusDetails{Name: "x", Kind: "secrets", Causes: []metav1.StatusCause{{Message: "cGFzc3dvcmQ="}}},
			},
			RequestObject:  &runtime.Unknown{Raw: []byte(`{"data":{"p":"cGFzc3dvcmQ="}}`)},
			ResponseObject: &runtime.Unknown{Raw: []byte(`{"data":{"p":"cGFzc3dvcmQ="}}`)},
		}
	}
	redacted := func(r *auditinternal.ObjectReference) *auditinternal.Event {
		ev := leaky(r)
		ev.Annotations = map[string]string{
			"authorization.k8s.io/decision":  "allow",
			"authorization.k8s.io/reason":    `RBAC: allowed by ClusterRoleBinding "b"`,
			"k8s.io/deprecated":              "true",
			"apiserver.latency.k8s.io/total": "5ms",
			failureAnnotation:                `[{"binding":"b","expressionIndex":0,"policy":"p","validationActions":["Audit"]}]`,
		}
		ev.ResponseStatus.Message = WithheldMessage
		ev.ResponseStatus.Details.Causes = nil
		ev.RequestObject, ev.ResponseObject = nil, nil
		return ev
	}
	tests := []struct {
		name string
		in   *auditinternal.Event
		want *auditinternal.Event
	}{
		{"a Secret's event is redacted", leaky(ref("", "secrets", "")), redacted(ref("", "secrets", ""))},
		{"a TokenRequest's event is redacted", leaky(ref("", "serviceaccounts", "token")), redacted(ref("", "serviceaccounts", "token"))},
		{"a TokenReview's event is redacted", leaky(ref("authentication.k8s.io", "tokenreviews", "")), redacted(ref("authentication.k8s.io", "tokenreviews", ""))},
		{"a ConfigMap's event is kept as kube records it", leaky(ref("", "configmaps", "")), leaky(ref("", "configmaps", ""))},
		{"a ServiceAccount's event is kept", leaky(ref("", "serviceaccounts", "")), leaky(ref("", "serviceaccounts", ""))},
		{"an event without an object (a failed authentication) is kept", leaky(nil), leaky(nil)},
		{"a validation_failure record that is not JSON is dropped", func() *auditinternal.Event {
			ev := leaky(ref("", "secrets", ""))
			ev.Annotations = map[string]string{failureAnnotation: "password is cGFzc3dvcmQ="}
			return ev
		}(), func() *auditinternal.Event {
			ev := redacted(ref("", "secrets", ""))
			ev.Annotations = nil
			return ev
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in.DeepCopy()
			got := Redact(tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Redact:\n got %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(tt.in, in) {
				t.Fatal("Redact changed the event it was given, which kube's filters keep writing")
			}
		})
	}
	t.Run("a clean event of a Secret is not copied", func(t *testing.T) {
		ev := &auditinternal.Event{ObjectRef: ref("", "secrets", ""), Annotations: map[string]string{"authorization.k8s.io/decision": "allow"},
			ResponseStatus: &metav1.Status{Code: 200}}
		if Redact(ev) != ev {
			t.Fatal("a clean event was copied")
		}
	})
}

// recordSink is an audit.Sink that keeps the last events it got.
type recordSink struct{ got []*auditinternal.Event }

func (r *recordSink) ProcessEvents(evs ...*auditinternal.Event) bool { r.got = evs; return true }

// TestRedactingSink: the sink writes redacted copies of the events that
// need it, and Redacting is applied once however often it is called.
func TestRedactingSink(t *testing.T) {
	rec := &recordSink{}
	sink := Redacting(rec)
	if Redacting(sink) != sink || Redacting(nil) != nil {
		t.Fatal("Redacting wraps a redacting sink again, or nil")
	}
	secret := &auditinternal.Event{ObjectRef: &auditinternal.ObjectReference{Resource: "secrets"}, ResponseStatus: &metav1.Status{Code: 403, Message: "data"}}
	cm := &auditinternal.Event{ObjectRef: &auditinternal.ObjectReference{Resource: "configmaps"}, ResponseStatus: &metav1.Status{Code: 403, Message: "data"}}
	sink.ProcessEvents(cm, secret)
	got := rec.got
	if len(got) != 2 || got[0] != cm || got[1] == secret || got[1].ResponseStatus.Message != WithheldMessage {
		t.Fatalf("sink got %+v", got)
	}
	if secret.ResponseStatus.Message != "data" {
		t.Fatal("the live event was changed")
	}
}
