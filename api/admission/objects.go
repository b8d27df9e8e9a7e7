package admission

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
)

// Resources is what the plugins' object interfaces need of the API the
// node serves: the served versions of a resource, for kube's
// matchPolicy Equivalent, and how a custom resource's objects convert
// between its versions.
type Resources interface {
	runtime.EquivalentResourceMapper
	// ConvertorOf returns the convertor of the custom resource of kind
	// gk, or nil when no custom resource of that kind is served.
	ConvertorOf(gk schema.GroupKind) runtime.ObjectConvertor
}

// NewObjectInterfaces returns the object interfaces kube's plugins create,
// convert, default and type objects with, as kube-apiserver's request
// scope hands them: the scheme for built-in kinds, and for custom ones
// Unstructured objects converted by their definition (served). served is
// called on use, never before: the served API is built after the
// admission chain, and custom resources come and go.
func NewObjectInterfaces(scheme *runtime.Scheme, served func() Resources) admission.ObjectInterfaces {
	return objectInterfaces{scheme: scheme, served: served}
}

type objectInterfaces struct {
	scheme *runtime.Scheme
	served func() Resources
}

func (o objectInterfaces) GetObjectCreater() runtime.ObjectCreater     { return o }
func (o objectInterfaces) GetObjectTyper() runtime.ObjectTyper         { return o.scheme }
func (o objectInterfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return o.scheme }
func (o objectInterfaces) GetObjectConvertor() runtime.ObjectConvertor { return o }

// GetEquivalentResourceMapper is the served API's versions of each
// resource; before it is served, none but the resource itself.
func (o objectInterfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	if r := o.served(); r != nil {
		return r
	}
	return runtime.NewEquivalentResourceRegistry()
}

// New creates a built-in kind from the scheme, any other as an
// Unstructured of that kind.
func (o objectInterfaces) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	if o.scheme.Recognizes(gvk) {
		return o.scheme.New(gvk)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// custom returns the convertor of obj's kind when it is a custom
// resource's Unstructured object, else nil.
func (o objectInterfaces) custom(obj any) runtime.ObjectConvertor {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || o.scheme.Recognizes(u.GroupVersionKind()) {
		return nil
	}
	r := o.served()
	if r == nil {
		return nil
	}
	return r.ConvertorOf(u.GroupVersionKind().GroupKind())
}

func (o objectInterfaces) Convert(in, out, context any) error {
	if c := o.custom(in); c != nil {
		return c.Convert(in, out, context)
	}
	return o.scheme.Convert(in, out, context)
}

func (o objectInterfaces) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	if c := o.custom(in); c != nil {
		return c.ConvertToVersion(in, gv)
	}
	return o.scheme.ConvertToVersion(in, gv)
}

func (o objectInterfaces) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return o.scheme.ConvertFieldLabel(gvk, label, value)
}
