package api

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// gizmos is the custom resource of these tests: example.com/v1 Gizmo,
// namespaced, with status and scale subresources over spec.replicas and
// status.replicas.
var gizmos = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}

func gizmoDefinition() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	names := apiextensionsv1.CustomResourceDefinitionNames{Plural: "gizmos", Singular: "gizmo", Kind: "Gizmo", ListKind: "GizmoList"}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.example.com", UID: "gizmo-uid"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: names, Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"},
				},
			}},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: names},
	}
}

// seenAttributes is a validating admission plugin that records what it is
// handed: kind, resource, subresource, and the kinds and replicas of the
// objects as the plugins see them (Unstructured, after the hook's
// conversion).
type seenAttributes struct {
	mu   sync.Mutex
	seen []seen
}

type seen struct {
	kind                schema.GroupVersionKind
	resource            schema.GroupVersionResource
	subresource         string
	objKind, oldKind    string
	replicas, oldReplic int64
}

func (p *seenAttributes) Handles(admission.Operation) bool { return true }

func (p *seenAttributes) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	s := seen{kind: a.GetKind(), resource: a.GetResource(), subresource: a.GetSubresource()}
	read := func(o runtime.Object) (string, int64) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return "", -1
		}
		r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		return u.GetKind(), r
	}
	s.objKind, s.replicas = read(a.GetObject())
	s.oldKind, s.oldReplic = read(a.GetOldObject())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, s)
	return nil
}

func (p *seenAttributes) last(t *testing.T) seen {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		t.Fatal("the plugin saw nothing")
	}
	return p.seen[len(p.seen)-1]
}

// recordingAdmission runs p as every store's validating admission, after
// the strategy, as the node runs ValidatingAdmissionPolicy.
type recordingAdmission struct{ p *seenAttributes }

func (recordingAdmission) For(schema.GroupVersionResource, schema.GroupVersionKind) []registry.AdmitFunc {
	return nil
}

func (r recordingAdmission) ForValidate(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.ValidateFunc {
	return []registry.ValidateFunc{admissionhook.HookValidate(admission.NewObjectInterfacesFromScheme(registry.Scheme), gvr, kind, r.p)}
}

// newCustomServer is a server over a bootstrapped registry of the core
// resources and gizmos, with adm as its admission.
func newCustomServer(t *testing.T, adm registry.Admission) *Server {
	t.Helper()
	s := newRegistryServer(t, adm, func(*Config) {})
	// As the node does: the definition is served once the API runs.
	resources, err := registry.CustomResources(gizmoDefinition(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.reg.ServeCustom("gizmo-uid", resources)
	s.CustomResourcesChanged()
	return s
}

// newRegistryServer is a server over a bootstrapped registry of the core
// resources on the real fsm, with adm as its admission and mod applied to
// its config.
func newRegistryServer(t *testing.T, adm registry.Admission, mod func(*Config)) *Server {
	t.Helper()
	l := &memLog{f: fsm.New()}
	stor, err := storage.New(&storage.Config{FreshWait: 20 * time.Millisecond, Feed: l.f}, l)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(stor, registry.CoreResources(), adm)
	ctx := genericapirequest.WithUser(context.Background(), fuzzAdmin)
	if err := reg.Bootstrap(genericapirequest.WithNamespace(ctx, ""), net.ParseIP("10.96.0.1"), 6443); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{}}}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	mod(cfg)
	s, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestScaleAdmissionSeesScale: a write through a custom resource's scale
// subresource is admitted, as kube admits it, with autoscaling/v1 Scales
// for the object and old object, kind autoscaling/v1 Scale, the custom
// resource and subresource "scale"; a write of the object itself is
// still admitted as the custom object.
func TestScaleAdmissionSeesScale(t *testing.T) {
	p := &seenAttributes{}
	s := newCustomServer(t, recordingAdmission{p})
	c := metricsClient{t: t, s: s}
	const gizmo = "/apis/example.com/v1/namespaces/default/gizmos/g"
	if rec := c.do(http.MethodPost, "/apis/example.com/v1/namespaces/default/gizmos", "application/json",
		`{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g"},"spec":{"replicas":1}}`, user.SystemPrivilegedGroup); rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	scaleKind := schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	tests := []struct {
		name                    string
		method, target, ct, bod string
		want                    seen
	}{
		{"a scale update is admitted as Scales", http.MethodPut, gizmo + "/scale", "application/json",
			`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"g","namespace":"default"},"spec":{"replicas":2}}`,
			seen{kind: scaleKind, resource: gizmos, subresource: "scale", objKind: "Scale", oldKind: "Scale", replicas: 2, oldReplic: 1}},
		{"a scale patch is admitted as Scales", http.MethodPatch, gizmo + "/scale", "application/merge-patch+json", `{"spec":{"replicas":3}}`,
			seen{kind: scaleKind, resource: gizmos, subresource: "scale", objKind: "Scale", oldKind: "Scale", replicas: 3, oldReplic: 2}},
		{"a write of the object itself is admitted as the object", http.MethodPatch, gizmo, "application/merge-patch+json", `{"spec":{"replicas":4}}`,
			seen{kind: gizmos.GroupVersion().WithKind("Gizmo"), resource: gizmos, objKind: "Gizmo", oldKind: "Gizmo", replicas: 4, oldReplic: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rec := c.do(tt.method, tt.target, tt.ct, tt.bod, user.SystemPrivilegedGroup); rec.Code != http.StatusOK {
				t.Fatalf("%s %s: %d %s", tt.method, tt.target, rec.Code, rec.Body)
			}
			if got := p.last(t); got != tt.want {
				t.Fatalf("admission saw %+v, want %+v", got, tt.want)
			}
		})
	}
}
