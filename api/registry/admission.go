package registry

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AdmitFunc is one admission step of a write: it runs on create (old nil)
// before the strategy prepares and validates the object, and on update
// after the new object is computed, before the strategy runs. It may
// mutate obj (ServiceAccount admission for pods) or refuse the write with
// a Status error (RBAC escalation checks). It runs on the leader, inside
// the optimistic update loop, so it must be safe to run more than once.
type AdmitFunc func(ctx context.Context, obj, old runtime.Object) error

// Admission is the node's admission chain, handed to the registry when it
// is built (New).
type Admission interface {
	// For returns the steps that guard writes of gvr (whose objects are
	// kind), in the order they
	// run, after the resource's own Resource.Admit. The registry asks once
	// per store, when it builds it, so a resource's chain is fixed before
	// the first request: a plugin is added by listing it in the chain, and
	// can never replace another's step.
	For(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []AdmitFunc
}

// ValidateFunc is one step of validating admission: it sees the object
// the strategy prepared and validated (obj; old on an update, nil on a
// create), as kube-apiserver runs validating admission after the
// strategy, and may refuse the write with a Status error. It must not
// change obj. dryRun is the request's. It runs on the leader, inside the
// optimistic update loop, so it must be safe to run more than once.
type ValidateFunc func(ctx context.Context, obj, old runtime.Object, dryRun bool) error

// ValidatingAdmission is an Admission with validating steps that run
// after the strategy, found by type assertion.
type ValidatingAdmission interface {
	Admission
	// ForValidate returns the validating steps of gvr's creates and
	// updates (whose objects are kind), in the order they run. Like For,
	// the registry asks once per store.
	ForValidate(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []ValidateFunc
}

// validateChain is the validating admission of one store: adm's steps.
func validateChain(res *Resource, adm Admission) []ValidateFunc {
	if v, ok := adm.(ValidatingAdmission); ok {
		return v.ForValidate(res.GVR, res.GVK())
	}
	return nil
}

// validateWrite runs the store's validating admission on the prepared
// obj; the first refusal ends it.
func (s *Store) validateWrite(ctx context.Context, obj, old runtime.Object, dryRun bool) error {
	for _, validate := range s.validateChain {
		if err := validate(ctx, obj, old, dryRun); err != nil {
			return err
		}
	}
	return nil
}

// AdmitDeleteFunc is one admission step of a delete: it gets the object
// as stored (old) and the delete's options, and may refuse the deletion
// with a Status error. It runs on the leader inside the delete loop, once
// the strategy has agreed to delete and before anything is written, so it
// must be safe to run more than once. dryRun is the request's.
type AdmitDeleteFunc func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error

// DeleteAdmission is an Admission that also guards deletes, found by type
// assertion: kube's validating plugins see DELETE with the old object.
type DeleteAdmission interface {
	Admission
	// ForDelete returns the steps that guard deletes of gvr (whose
	// objects are kind), in the order they run, after the resource's own
	// AdmitDelete. Like For, the registry asks once per store.
	ForDelete(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []AdmitDeleteFunc
}

// deleteChain is the delete admission of one store: adm's steps for it.
func deleteChain(res *Resource, adm Admission) []AdmitDeleteFunc {
	if d, ok := adm.(DeleteAdmission); ok {
		return d.ForDelete(res.GVR, res.GVK())
	}
	return nil
}

// admitDelete runs the store's delete admission on old; the first refusal
// ends it.
func (s *Store) admitDelete(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
	for _, admit := range s.deleteChain {
		if err := admit(ctx, old, opts, dryRun); err != nil {
			return err
		}
	}
	return nil
}

// chain is the admission of one store: the resource's own rule, then the
// node's plugins for it.
func chain(res *Resource, adm Admission) []AdmitFunc {
	var steps []AdmitFunc
	if res.Admit != nil {
		steps = append(steps, res.Admit)
	}
	if adm != nil {
		steps = append(steps, adm.For(res.GVR, res.GVK())...)
	}
	return steps
}

// admitWrite runs the store's admission chain on obj; the first refusal
// ends it.
func (s *Store) admitWrite(ctx context.Context, obj, old runtime.Object) error {
	for _, admit := range s.chain {
		if err := admit(ctx, obj, old); err != nil {
			return err
		}
	}
	return nil
}
