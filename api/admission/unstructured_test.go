package admission

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
)

// recordingPlugin is a validating plugin that keeps what it was shown and
// annotates the request, as kube's policy plugin does.
type recordingPlugin struct {
	*admission.Handler
	seen []runtime.Object
}

func (p *recordingPlugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	p.seen = append(p.seen, a.GetObject(), a.GetObject(), a.GetOldObject())
	if err := a.AddAnnotation("example.com/seen", "yes"); err != nil {
		return err
	}
	// A changed value is refused by the record's own rules.
	if err := a.AddAnnotation("example.com/seen", "no"); err == nil {
		return errChanged
	}
	return nil
}

var errChanged = errors.New("a changed annotation was accepted")

// HookValidate hands plugins the object once converted to an Unstructured
// of the request's kind (the same one on every call), and kube's audit
// wrapper still finds the plugins' annotations.
func TestHookValidateUnstructured(t *testing.T) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	p := &recordingPlugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	hook := HookValidate(admission.NewObjectInterfacesFromScheme(legacyscheme.Scheme), gvr, gvk, admission.WithAudit(p))

	ctx := genericapirequest.WithNamespace(genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"}), "default")
	ctx = audit.WithAuditContext(ctx)
	audit.AuditContextFrom(ctx).RequestAuditConfig.Level = auditinternal.LevelMetadata
	audit.AuditContextFrom(ctx).Event.Level = auditinternal.LevelMetadata
	obj := &api.ConfigMap{Data: map[string]string{"k": "v"}}
	obj.Name = "cm"
	if err := hook(ctx, obj, nil, false); err != nil {
		t.Fatal(err)
	}
	if len(p.seen) != 3 || p.seen[2] != nil {
		t.Fatalf("plugin saw %v, want the object twice and no old object", p.seen)
	}
	u, ok := p.seen[0].(*unstructured.Unstructured)
	if !ok || p.seen[1] != p.seen[0] {
		t.Fatalf("plugin saw %T and %T, want one *unstructured.Unstructured", p.seen[0], p.seen[1])
	}
	if u.GroupVersionKind() != gvk || u.GetName() != "cm" {
		t.Fatalf("object %v, want v1 ConfigMap cm", u.Object)
	}
	if data, _, _ := unstructured.NestedStringMap(u.Object, "data"); data["k"] != "v" {
		t.Fatalf("object data %v", u.Object["data"])
	}
	var typed corev1.ConfigMap
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &typed); err != nil || typed.Data["k"] != "v" {
		t.Fatalf("the Unstructured does not read back as a v1 ConfigMap: %v %+v", err, typed)
	}
	if got := audit.AuditContextFrom(ctx).Event.Annotations["example.com/seen"]; got != "yes" {
		t.Fatalf("audit annotations %v, want example.com/seen=yes", audit.AuditContextFrom(ctx).Event.Annotations)
	}
}

// A custom object, handled in its served version already, reaches the
// plugins as it is: no conversion, which the scheme could not make.
func TestHookValidateCustomObject(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gizmo"}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}
	p := &recordingPlugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	hook := HookValidate(admission.NewObjectInterfacesFromScheme(legacyscheme.Scheme), gvr, gvk, p)
	ctx := genericapirequest.WithNamespace(genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"}), "default")
	obj := &unstructured.Unstructured{Object: map[string]interface{}{"spec": map[string]interface{}{"size": int64(3)}}}
	obj.SetGroupVersionKind(gvk)
	obj.SetName("g1")
	if err := hook(ctx, obj, nil, false); err != nil {
		t.Fatal(err)
	}
	if len(p.seen) != 3 || p.seen[0] != obj || p.seen[1] != obj {
		t.Fatalf("plugin saw %v, want the object itself twice", p.seen)
	}
}
