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

// Hook adapts plugins to one step of a store's admission chain
// (registry.AdmitFunc) for the resource gvr of
// kind gvk (the external group version the plugins see). Mutating plugins
// run first, then validating ones, each only for the operations it handles.
func Hook(scheme *runtime.Scheme, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, obj, old runtime.Object) error {
	oi := admission.NewObjectInterfacesFromScheme(scheme)
	return func(ctx context.Context, obj, old runtime.Object) error {
		u, ok := genericapirequest.UserFrom(ctx)
		if !ok {
			return ErrNoUser
		}
		ns, _ := genericapirequest.NamespaceFrom(ctx)
		name := ""
		if m, err := meta.Accessor(obj); err == nil {
			name = m.GetName()
		}
		op := admission.Create
		var opts runtime.Object = &metav1.CreateOptions{}
		if old != nil {
			op, opts = admission.Update, &metav1.UpdateOptions{}
		}
		sub := ""
		if info, ok := genericapirequest.RequestInfoFrom(ctx); ok && info.IsResourceRequest {
			sub = info.Subresource
		}
		attrs := admission.NewAttributesRecord(obj, old, gvk, ns, name, gvr, sub, op, opts, false, u)
		for _, p := range plugins {
			if m, ok := p.(admission.MutationInterface); ok && p.Handles(op) {
				if err := m.Admit(ctx, attrs, oi); err != nil {
					return err
				}
			}
		}
		for _, p := range plugins {
			if v, ok := p.(admission.ValidationInterface); ok && p.Handles(op) {
				if err := v.Validate(ctx, attrs, oi); err != nil {
					return err
				}
			}
		}
		return nil
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
		u, ok := genericapirequest.UserFrom(ctx)
		if !ok {
			return ErrNoUser
		}
		ns, _ := genericapirequest.NamespaceFrom(ctx)
		name := ""
		if m, err := meta.Accessor(obj); err == nil {
			name = m.GetName()
		}
		var dry []string
		if dryRun {
			dry = []string{metav1.DryRunAll}
		}
		op := admission.Create
		var opts runtime.Object = &metav1.CreateOptions{DryRun: dry}
		if old != nil {
			op, opts = admission.Update, &metav1.UpdateOptions{DryRun: dry}
		}
		sub := ""
		if info, ok := genericapirequest.RequestInfoFrom(ctx); ok && info.IsResourceRequest {
			sub = info.Subresource
		}
		attrs := admission.NewAttributesRecord(obj, old, gvk, ns, name, gvr, sub, op, opts, dryRun, u)
		for _, p := range plugins {
			if v, ok := p.(admission.ValidationInterface); ok && p.Handles(op) {
				if err := v.Validate(ctx, attrs, oi); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// HookDelete adapts validating plugins to one step of a store's delete
// admission (registry.AdmitDeleteFunc) for the resource gvr of kind gvk:
// each plugin that handles DELETE validates the object as stored, as
// kube-apiserver's delete handler runs its admission.
func HookDelete(scheme *runtime.Scheme, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
	oi := admission.NewObjectInterfacesFromScheme(scheme)
	return func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
		u, ok := genericapirequest.UserFrom(ctx)
		if !ok {
			return ErrNoUser
		}
		ns, _ := genericapirequest.NamespaceFrom(ctx)
		name := ""
		if m, err := meta.Accessor(old); err == nil {
			name = m.GetName()
		}
		if opts == nil {
			opts = &metav1.DeleteOptions{}
		}
		if dryRun && len(opts.DryRun) == 0 {
			opts = opts.DeepCopy()
			opts.DryRun = []string{metav1.DryRunAll}
		}
		attrs := admission.NewAttributesRecord(nil, old, gvk, ns, name, gvr, "", admission.Delete, opts, dryRun, u)
		for _, p := range plugins {
			if v, ok := p.(admission.ValidationInterface); ok && p.Handles(admission.Delete) {
				if err := v.Validate(ctx, attrs, oi); err != nil {
					return err
				}
			}
		}
		return nil
	}
}
