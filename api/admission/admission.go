package admission

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager"
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

// requestDryRun reports whether the write request in ctx is a dry run
// (WithWriteOptions).
func requestDryRun(ctx context.Context) bool {
	o, _ := ctx.Value(writeOptionsKey{}).(writeOptions)
	return len(o.dryRun) > 0
}

// reinvoker runs a chain's mutating plugins as kube-apiserver's admission
// chain does: in order, and all of them once more when one of them asks
// for it (a mutating webhook or policy with reinvocationPolicy IfNeeded
// whose object a later plugin changed). kube's reinvoker is unexported,
// and the constructor that returns it (admission.Plugins.NewFromPlugins)
// checks each plugin's initialisation, which here comes later, once the
// node's API is up; this is the same two steps.
type reinvoker struct{ chain admission.Interface }

func (r reinvoker) Handles(op admission.Operation) bool { return r.chain.Handles(op) }

func (r reinvoker) Admit(ctx context.Context, attrs admission.Attributes, oi admission.ObjectInterfaces) error {
	m := r.chain.(admission.MutationInterface)
	if err := m.Admit(ctx, attrs, oi); err != nil {
		return err
	}
	if s := attrs.GetReinvocationContext(); s.ShouldReinvoke() {
		s.SetIsReinvoke()
		return m.Admit(ctx, attrs, oi)
	}
	return nil
}

func (r reinvoker) Validate(ctx context.Context, attrs admission.Attributes, oi admission.ObjectInterfaces) error {
	return r.chain.(admission.ValidationInterface).Validate(ctx, attrs, oi)
}

// Hook adapts plugins to one step of a store's admission chain
// (registry.AdmitFunc) for the resource gvr of kind gvk (the external
// group version the plugins see), with oi to create and convert objects.
// The plugins run as kube-apiserver's handlers run its chain: kube's
// chain (admission.NewChainHandler) with reinvocation, mutating plugins
// first, then validating ones, each only for the operations it handles,
// with the request's dry run; and, as kube's handlers wrap it
// (fieldmanager.NewManagedFieldsValidatingAdmissionController), managed
// fields that a mutating plugin left undecodable are put back as they
// were, with a warning, so that no webhook can store an object that
// server-side apply can no longer read.
func Hook(oi admission.ObjectInterfaces, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, obj, old runtime.Object) error {
	chain := fieldmanager.NewManagedFieldsValidatingAdmissionController(reinvoker{admission.NewChainHandler(plugins...)})
	return func(ctx context.Context, obj, old runtime.Object) error {
		dryRun := requestDryRun(ctx)
		op, opts := writeOp(ctx, old, dryRun)
		attrs, err := attributes(ctx, obj, old, gvk, gvr, op, opts, dryRun)
		if err != nil {
			return err
		}
		if !chain.Handles(op) {
			return nil
		}
		if err := chain.(admission.MutationInterface).Admit(ctx, attrs, oi); err != nil {
			return err
		}
		if err := writeBack(ctx, gvr, attrs.GetObject(), obj); err != nil {
			return err
		}
		return chain.(admission.ValidationInterface).Validate(ctx, attrs, oi)
	}
}

// HookValidate adapts validating plugins to a step of a store's
// validating admission (registry.ValidateFunc) for the resource gvr of
// kind gvk: each plugin that handles the operation validates the object
// the strategy prepared, with the request's dry run, as kube-apiserver's
// store runs validating admission after the strategy.
func HookValidate(oi admission.ObjectInterfaces, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, obj, old runtime.Object, dryRun bool) error {
	chain := admission.NewChainHandler(plugins...)
	return func(ctx context.Context, obj, old runtime.Object, dryRun bool) error {
		op, opts := writeOp(ctx, old, dryRun)
		attrs, err := attributes(ctx, obj, old, gvk, gvr, op, opts, dryRun)
		if err != nil {
			return err
		}
		return chain.Validate(ctx, newUnstructuredAttributes(attrs, oi.GetObjectConvertor(), attrs.GetKind()), oi)
	}
}

// HookDelete adapts plugins to one step of a store's delete admission
// (registry.AdmitDeleteFunc) for the resource gvr of kind gvk, as
// kube-apiserver's delete handler runs its admission
// (rest.AdmissionToValidateObjectDeleteFunc): mutating plugins that
// handle DELETE admit it first, with the object as stored and no new
// object (a mutating webhook is called, and kube's plugin refuses any
// patch it answers), then validating plugins validate it.
func HookDelete(oi admission.ObjectInterfaces, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, plugins ...admission.Interface) func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
	chain := admission.NewChainHandler(plugins...)
	return func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
		if opts == nil {
			opts = &metav1.DeleteOptions{}
		}
		// Typed as kube's delete handler types them (meta.k8s.io/v1,
		// whatever version the client sent them in).
		opts = opts.DeepCopy()
		opts.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("DeleteOptions"))
		if dryRun && len(opts.DryRun) == 0 {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		attrs, err := attributes(ctx, nil, old, gvk, gvr, admission.Delete, opts, dryRun)
		if err != nil {
			return err
		}
		if err := chain.Admit(ctx, attrs, oi); err != nil {
			return err
		}
		return chain.Validate(ctx, newUnstructuredAttributes(attrs, oi.GetObjectConvertor(), attrs.GetKind()), oi)
	}
}
