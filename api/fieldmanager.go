package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/apply"
)

// Server-side apply and managedFields.
//
// Every write goes through kube's FieldManager (apply.NewFieldManager), built
// once per resource and subresource. Updates and patches record the writer's
// fields inside the store's optimistic loop, by wrapping the
// rest.UpdatedObjectInfo the store calls with each current object; creates
// record them before the store's Create. An apply merges inside the same
// loop, so a concurrent write makes it merge again against the newer object.

// fieldManagers holds the FieldManager of every served resource and
// subresource.
type fieldManagers map[fieldManagerKey]*managedfields.FieldManager

type fieldManagerKey struct {
	gvr schema.GroupVersionResource
	sub string
}

// newFieldManagers builds one TypeConverter for every served kind, from
// kube's generated OpenAPI definitions as kube-apiserver does, and a
// FieldManager per resource and subresource.
func newFieldManagers(stores []*registry.Store) (fieldManagers, error) {
	var names []string
	for _, st := range stores {
		obj, err := registry.Scheme.New(st.GVK())
		if err != nil {
			return nil, fmt.Errorf("field managers: %v is not in the scheme: %w", st.GVK(), err)
		}
		names = append(names, goTypeName(obj))
	}
	tc, err := apply.NewTypeConverter(apply.TypeConverterConfig{
		Definitions:    generatedopenapi.GetOpenAPIDefinitions,
		DefinitionName: openAPINamer.GetDefinitionName,
		TypeNames:      names,
	})
	if err != nil {
		return nil, err
	}
	out := fieldManagers{}
	add := func(st *registry.Store, sub string, strategy any) error {
		fm, err := apply.NewFieldManager(apply.FieldManagerConfig{
			TypeConverter: tc, Scheme: registry.Scheme, Kind: st.GVK(), Subresource: sub, Strategy: strategy,
		})
		if err != nil {
			return fmt.Errorf("field manager for %v %q: %w", st.GVR, sub, err)
		}
		out[fieldManagerKey{st.GVR, sub}] = fm
		return nil
	}
	for _, st := range stores {
		var strategy any = st.UpdateStrategy
		if strategy == nil {
			strategy = st.CreateStrategy
		}
		if err := add(st, "", strategy); err != nil {
			return nil, err
		}
		for sub, strategy := range st.Subresources {
			if err := add(st, sub, strategy); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// get returns the FieldManager of st's subresource sub ("" for st itself).
func (f fieldManagers) get(st *registry.Store, sub string) *managedfields.FieldManager {
	if st.Custom != nil {
		return st.Custom.FieldManagers[sub]
	}
	return f[fieldManagerKey{st.GVR, sub}]
}

// managedUpdate records the managed fields of an update or a non-apply patch:
// it runs the wrapped UpdatedObjectInfo and then the FieldManager, against
// the object the store's loop passes in.
type managedUpdate struct {
	rest.UpdatedObjectInfo
	fm      *managedfields.FieldManager
	manager string
}

func (m *managedUpdate) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	obj, err := m.UpdatedObjectInfo.UpdatedObject(ctx, old)
	if err != nil {
		return nil, err
	}
	obj = m.fm.UpdateNoErrors(old, obj, m.manager)
	return ignoreTimestampsOnly(ctx, obj, old)
}

// ReappliesToCurrent is the wrapped update's (registry.Reapplied).
func (m *managedUpdate) ReappliesToCurrent() bool {
	r, ok := m.UpdatedObjectInfo.(registry.Reapplied)
	return ok && r.ReappliesToCurrent()
}

// ignoreTimestampsOnly keeps the managedFields time stamps of old when they
// are all that changed, so that a write that changes nothing else (a
// repeated apply) writes nothing and keeps the resourceVersion, as
// kube-apiserver's store does. A resourceVersion left empty for the store's
// loop counts as old's.
func ignoreTimestampsOnly(ctx context.Context, obj, old runtime.Object) (runtime.Object, error) {
	nm, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if rv := nm.GetResourceVersion(); rv == "" {
		nm.SetResourceVersion(om.GetResourceVersion())
		defer nm.SetResourceVersion(rv)
	}
	return fieldmanager.IgnoreManagedFieldsTimestampsTransformer(ctx, obj, old)
}

// managed wraps info so that the write is recorded in managedFields.
func (s *Server) managed(st *registry.Store, sub string, info rest.UpdatedObjectInfo, manager string) rest.UpdatedObjectInfo {
	fm := s.fields.get(st, sub)
	if fm == nil {
		return info
	}
	return &managedUpdate{UpdatedObjectInfo: info, fm: fm, manager: manager}
}

// applyInfo is a server-side apply of patch by manager, merged with whatever
// object is current when the store's loop asks. kube's applyPatcher: the
// body is decoded as YAML (JSON is YAML), merged by the FieldManager, and
// then checked strictly for duplicate fields unless fieldValidation is
// Ignore. A body in compact JSON, what clients send, is decoded and checked
// in one JSON pass with the same outcome (apply.DecodeApplyPatch).
type applyInfo struct {
	store     *registry.Store
	fm        *managedfields.FieldManager
	patch     []byte
	manager   string
	force     bool
	directive string
	name      string
	namespace string
}

func (a *applyInfo) Preconditions() *metav1.Preconditions { return nil }

// ReappliesToCurrent: an apply is merged with the current object
// (registry.Reapplied).
func (a *applyInfo) ReappliesToCurrent() bool { return true }

func (a *applyInfo) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	patch, err := apply.DecodeApplyPatch(a.patch)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	obj, err := a.fm.Apply(old, patch.Object, a.manager, a.force)
	if err != nil {
		if obj, err = a.applyUnknown(ctx, old, patch, err); err != nil {
			return nil, err
		}
	}
	if a.directive == metav1.FieldValidationStrict || a.directive == metav1.FieldValidationWarn {
		if err := patch.CheckStrict(); err != nil {
			if a.directive == metav1.FieldValidationStrict {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			warning.AddWarning(ctx, "", strings.TrimPrefix(err.Error(), apply.ErrStrictApplyPatch.Error()+": "))
		}
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	nm, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if om.GetUID() == "" && nm.GetUID() != "" {
		return nil, apierrors.NewConflict(a.store.GroupResource(), a.name,
			fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", nm.GetUID()))
	}
	// A resourceVersion the apply did not set is no precondition.
	if om.GetUID() != "" && nm.GetResourceVersion() == om.GetResourceVersion() {
		nm.SetResourceVersion("")
	}
	if err := rest.EnsureObjectNamespaceMatchesRequestNamespace(rest.ExpectedNamespaceForScope(a.namespace, a.store.Namespaced), nm); err != nil {
		return nil, err
	}
	if err := checkName(obj, a.name, a.namespace); err != nil {
		return nil, err
	}
	if om.GetUID() == "" {
		return obj, nil
	}
	return ignoreTimestampsOnly(ctx, obj, old)
}

// applyUnknown answers an apply the FieldManager refused with an error that
// is not a Status (conflicts and bad kinds are). structured-merge-diff
// cannot type a patch with a field the schema does not declare, or a value
// of the wrong type, and kube-apiserver answers both with a 500. The
// specification's field validation applies to an apply as to every PATCH:
// Strict refuses the unknown fields with a 400 listing them all, Warn drops
// them with one warning each, Ignore drops them silently; a value of the
// wrong type is a 400 (COMPATIBILITY.md). An error the patch does not cause
// stays what it was.
func (a *applyInfo) applyUnknown(ctx context.Context, old runtime.Object, patch *apply.ApplyPatch, applyErr error) (runtime.Object, error) {
	var status apierrors.APIStatus
	if errors.As(applyErr, &status) {
		return nil, applyErr
	}
	into, err := a.store.New()
	if err != nil {
		return nil, applyErr
	}
	unknown, err := patch.UnknownFields(into)
	if err != nil {
		return nil, apierrors.NewBadRequest(applyErr.Error())
	}
	if len(unknown) == 0 {
		return nil, applyErr
	}
	if a.directive == metav1.FieldValidationStrict {
		errs := make([]error, len(unknown))
		for i, path := range unknown {
			errs[i] = fmt.Errorf("unknown field %q", path)
		}
		gvk := a.store.GVK()
		return nil, transformDecodeError(a.store.KindName, runtime.NewStrictDecodingError(errs), &gvk, nil)
	}
	if !patch.PruneFields(unknown) {
		return nil, apierrors.NewBadRequest(applyErr.Error())
	}
	obj, err := a.fm.Apply(old, patch.Object, a.manager, a.force)
	if err != nil {
		if errors.As(err, &status) {
			return nil, err
		}
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if a.directive == metav1.FieldValidationWarn {
		for _, path := range unknown {
			warning.AddWarning(ctx, "", fmt.Sprintf("unknown field %q", path))
		}
	}
	return obj, nil
}

// applyCreate creates the object an apply names when it does not exist, as
// kube-apiserver's patch handler does (forceAllowCreate): the apply is merged
// into an empty object, the caller must also be allowed to create, and the
// object is created with the apply's managed fields.
func (s *Server) applyCreate(ctx context.Context, a *applyInfo, dryRun bool) (runtime.Object, error) {
	obj, err := a.UpdatedObject(ctx, a.store.NewFunc())
	if err != nil {
		return nil, err
	}
	if err := s.authorizeCreate(ctx, a.store, a.namespace, a.name); err != nil {
		return nil, err
	}
	return a.store.Create(ctx, obj, dryRun)
}

// authorizeCreate asks the Authorizer whether the caller may create the
// object a write is about to create; kube's withAuthorization for creates
// on update and apply.
func (s *Server) authorizeCreate(ctx context.Context, st *registry.Store, ns, name string) error {
	if s.cfg.Authorizer == nil {
		return nil
	}
	u, _ := genericapirequest.UserFrom(ctx)
	attrs := authorizer.AttributesRecord{
		User: u, ResourceRequest: true, Verb: "create",
		APIGroup: st.GVR.Group, APIVersion: st.GVR.Version, Resource: st.GVR.Resource,
		Namespace: ns, Name: name,
	}
	if info, ok := genericapirequest.RequestInfoFrom(ctx); ok {
		attrs.Path = info.Path
	}
	decision, reason, err := s.cfg.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	return responsewriters.ForbiddenStatusError(attrs, reason)
}

// patchApply runs an apply: an update of the current object, or a create
// when there is none. A create that loses a race with another create goes
// back to the update.
func (s *Server) patchApply(ctx context.Context, st *registry.Store, sub string, a *applyInfo, dryRun bool) (runtime.Object, bool, error) {
	// Apply's managedFields are its result: never dropped to fit the size limit (as kube).
	ctx = storage.WithManagedFieldsKept(ctx)
	for attempt := 0; ; attempt++ {
		out, err := updateObject(ctx, st, sub, a.name, a, dryRun)
		if !apierrors.IsNotFound(err) || sub != "" || st.CreateStrategy == nil {
			return out, false, err
		}
		if !isNotFoundOf(err, st, a.name) {
			return nil, false, err
		}
		out, err = s.applyCreate(ctx, a, dryRun)
		if apierrors.IsAlreadyExists(err) && attempt < 3 {
			continue
		}
		return out, err == nil, err
	}
}

// isNotFoundOf reports whether err is the store's NotFound of the object
// itself, not of something else (its namespace).
func isNotFoundOf(err error, st *registry.Store, name string) bool {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil {
		return false
	}
	d := se.ErrStatus.Details
	return d.Name == name && d.Kind == st.GVR.Resource && d.Group == st.GVR.Group
}

// CustomResourceSchemas are the OpenAPI v3 schemas of the built-in types
// a custom resource's schema refers to (ObjectMeta and what it
// references), named as kube names them, for typing custom objects in
// server-side apply (registry.CustomResources). Built once per process.
var CustomResourceSchemas = sync.OnceValues(func() (map[string]*spec.Schema, error) {
	return apply.Schemas(apply.TypeConverterConfig{
		Definitions:    generatedopenapi.GetOpenAPIDefinitions,
		DefinitionName: openAPINamer.GetDefinitionName,
		TypeNames:      []string{goTypeName(&metav1.ObjectMeta{})},
	})
})
