package admission

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// ErrNoUser is returned when a write reaches admission without an
// authenticated user in its context; the filter chain always sets one.
var ErrNoUser = errors.New("admission: no user in the request context")

// attributes builds the admission attributes of a write of obj (old for
// an update or a delete, nil for a create) from the request in ctx: its
// user, namespace and subresource, and the View it carries for gvr, if
// any. name is read from whichever object is given, obj first.
func attributes(ctx context.Context, obj, old runtime.Object, gvk schema.GroupVersionKind, gvr schema.GroupVersionResource,
	op admission.Operation, opts runtime.Object, dryRun bool) (admission.Attributes, error) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, ErrNoUser
	}
	obj, old, gvk, err := viewed(ctx, gvr, gvk, obj, old)
	if err != nil {
		return nil, err
	}
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	named := obj
	if named == nil {
		named = old
	}
	name := ""
	if m, err := meta.Accessor(named); err == nil {
		name = m.GetName()
	}
	sub := ""
	if info, ok := genericapirequest.RequestInfoFrom(ctx); ok && info.IsResourceRequest {
		sub = info.Subresource
	}
	return admission.NewAttributesRecord(obj, old, gvk, ns, name, gvr, sub, op, opts, dryRun, u), nil
}

// validate runs the validating plugins that handle attrs' operation; the
// first refusal ends it.
func validate(ctx context.Context, attrs admission.Attributes, oi admission.ObjectInterfaces, plugins []admission.Interface) error {
	for _, p := range plugins {
		if v, ok := p.(admission.ValidationInterface); ok && p.Handles(attrs.GetOperation()) {
			if err := v.Validate(ctx, attrs, oi); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOptions are the options a create, update or patch request came
// with, as admission hands them to plugins.
type writeOptions struct {
	dryRun                        []string
	fieldManager, fieldValidation string
}

type writeOptionsKey struct{}

// WithWriteOptions returns ctx carrying the options of the write request
// it serves (a patch's PatchOptions give the same three fields), so that
// admission hands its plugins the request's CreateOptions or UpdateOptions
// whole, as kube's handlers do: a policy's request.options shows the
// field manager and the field validation level besides dryRun.
func WithWriteOptions(ctx context.Context, dryRun []string, fieldManager, fieldValidation string) context.Context {
	return context.WithValue(ctx, writeOptionsKey{}, writeOptions{dryRun: dryRun, fieldManager: fieldManager, fieldValidation: fieldValidation})
}

// writeOp is the operation and options of a create (old nil) or update:
// the request's own (WithWriteOptions), else only the dry run, typed as
// kube's handlers type them.
func writeOp(ctx context.Context, old runtime.Object, dryRun bool) (admission.Operation, runtime.Object) {
	o, ok := ctx.Value(writeOptionsKey{}).(writeOptions)
	if !ok && dryRun {
		o.dryRun = []string{metav1.DryRunAll}
	}
	if old != nil {
		uo := &metav1.UpdateOptions{DryRun: o.dryRun, FieldManager: o.fieldManager, FieldValidation: o.fieldValidation}
		uo.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("UpdateOptions"))
		return admission.Update, uo
	}
	co := &metav1.CreateOptions{DryRun: o.dryRun, FieldManager: o.fieldManager, FieldValidation: o.fieldValidation}
	co.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("CreateOptions"))
	return admission.Create, co
}

// Hook adapts plugins to one step of a store's admission chain
// (registry.AdmitFunc) for the resource gvr of
// kind gvk (the external group version the plugins see). Mutating plugins
// run first, then validating ones, each only for the operations it handles.
func Hook(scheme *runtime.Scheme, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, obj, old runtime.Object) error {
	oi := admission.NewObjectInterfacesFromScheme(scheme)
	return func(ctx context.Context, obj, old runtime.Object) error {
		op, opts := writeOp(ctx, old, false)
		attrs, err := attributes(ctx, obj, old, gvk, gvr, op, opts, false)
		if err != nil {
			return err
		}
		for _, p := range plugins {
			if m, ok := p.(admission.MutationInterface); ok && p.Handles(op) {
				if err := m.Admit(ctx, attrs, oi); err != nil {
					return err
				}
			}
		}
		return validate(ctx, attrs, oi, plugins)
	}
}

// HookValidate adapts validating plugins to a step of a store's
// validating admission (registry.ValidateFunc) for the resource gvr of
// kind gvk: each plugin that handles the operation validates the object
// the strategy prepared, with the request's dry run, as kube-apiserver's
// store runs validating admission after the strategy.
func HookValidate(scheme *runtime.Scheme, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, obj, old runtime.Object, dryRun bool) error {
	oi := admission.NewObjectInterfacesFromScheme(scheme)
	return func(ctx context.Context, obj, old runtime.Object, dryRun bool) error {
		op, opts := writeOp(ctx, old, dryRun)
		attrs, err := attributes(ctx, obj, old, gvk, gvr, op, opts, dryRun)
		if err != nil {
			return err
		}
		return validate(ctx, newUnstructuredAttributes(attrs, scheme, attrs.GetKind()), oi, plugins)
	}
}

// HookDelete adapts validating plugins to one step of a store's delete
// admission (registry.AdmitDeleteFunc) for the resource gvr of kind gvk:
// each plugin that handles DELETE validates the object as stored, as
// kube-apiserver's delete handler runs its admission.
func HookDelete(scheme *runtime.Scheme, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
	oi := admission.NewObjectInterfacesFromScheme(scheme)
	return func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
		if opts == nil {
			opts = &metav1.DeleteOptions{}
		}
		if dryRun && len(opts.DryRun) == 0 {
			opts = opts.DeepCopy()
			opts.DryRun = []string{metav1.DryRunAll}
		}
		attrs, err := attributes(ctx, nil, old, gvk, gvr, admission.Delete, opts, dryRun)
		if err != nil {
			return err
		}
		return validate(ctx, newUnstructuredAttributes(attrs, scheme, attrs.GetKind()), oi, plugins)
	}
}
