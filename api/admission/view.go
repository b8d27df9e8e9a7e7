package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// View is what admission sees of a write made through a subresource whose
// objects are not the resource's own. kube's scale subresource of a
// custom resource is one: the store writes the custom object, while
// admission gets autoscaling/v1 Scales (kube's handler admits the Scale
// the client sent, and its ScaleREST converts both objects to Scales
// before validating admission runs: apiextensions-apiserver
// registry/customresource toScaleUpdateValidation).
//
// The hooks (Hook, HookValidate, HookDelete) of Resource build a write's
// attributes from the view when its context carries one (WithView): kind
// Kind, and the object and old object passed through Convert. Resource,
// subresource, name, namespace, operation and user stay the request's.
// What mutating plugins (webhooks, policies) changed in the view is
// written back into the store's object with WriteBack, as kube's
// ScaleREST writes the admitted Scale's replicas into the custom object.
type View struct {
	// Resource is the resource whose hooks see the view; a hook of any
	// other resource run with the same context ignores it.
	Resource schema.GroupVersionResource
	// Kind is the kind of the view's objects.
	Kind schema.GroupVersionKind
	// Convert makes the view of one of the store's objects; its error
	// fails the write, as kube's conversion error does.
	Convert func(runtime.Object) (runtime.Object, error)
	// WriteBack sets in obj, the store's object, what the view holds
	// after mutating admission; its error fails the write.
	WriteBack func(view, obj runtime.Object) error
}

type viewKey struct{}

// WithView returns ctx with v: the writes of v.Resource made with it are
// admitted as v.
func WithView(ctx context.Context, v View) context.Context {
	return context.WithValue(ctx, viewKey{}, v)
}

// writeBack sets in obj what mutating admission left in attrs' object,
// when obj was admitted as a view (viewed): attrs' object is then the
// view, not obj.
func writeBack(ctx context.Context, gvr schema.GroupVersionResource, view, obj runtime.Object) error {
	v, ok := ctx.Value(viewKey{}).(View)
	if !ok || v.Resource != gvr || obj == nil || view == obj {
		return nil
	}
	return v.WriteBack(view, obj)
}

// viewed returns what admission of a write of gvr (objects of kind gvk)
// sees: the view ctx carries for gvr, else the objects as they are.
func viewed(ctx context.Context, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, obj, old runtime.Object) (runtime.Object, runtime.Object, schema.GroupVersionKind, error) {
	v, ok := ctx.Value(viewKey{}).(View)
	if !ok || v.Resource != gvr {
		return obj, old, gvk, nil
	}
	convert := func(o runtime.Object) (runtime.Object, error) {
		if o == nil {
			return nil, nil
		}
		return v.Convert(o)
	}
	vo, err := convert(obj)
	if err != nil {
		return nil, nil, gvk, err
	}
	vold, err := convert(old)
	if err != nil {
		return nil, nil, gvk, err
	}
	return vo, vold, v.Kind, nil
}
