package api

import (
	"context"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/apply"
)

func (s *Server) create(w http.ResponseWriter, req *http.Request, st *registry.Store) {
	if st.CreateStrategy == nil {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "create"))
		return
	}
	format, si, body, opts, err := s.createRequest(req, forStore(st))
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	obj, err := s.decodeBody(req.Context(), st, si, body, opts.FieldValidation)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.auditRequest(req, obj, st.GVR.GroupVersion(), st.GVR, "")
	m, err := meta.Accessor(obj)
	if err != nil {
		s.writeError(w, req, apierrors.NewInternalError(err))
		return
	}
	rest.WipeObjectMetaSystemFields(m)
	ns, _ := genericapirequest.NamespaceFrom(req.Context())
	if err := rest.EnsureObjectNamespaceMatchesRequestNamespace(rest.ExpectedNamespaceForScope(ns, st.Namespaced), m); err != nil {
		s.writeError(w, req, err)
		return
	}
	if fm := s.fields.get(st, ""); fm != nil {
		obj = fm.UpdateNoErrors(st.NewFunc(), obj, apply.ManagerOrUserAgent(opts.FieldManager, req.UserAgent()))
	}
	ctx := admissionhook.WithWriteOptions(req.Context(), opts.DryRun, opts.FieldManager, opts.FieldValidation)
	out, err := st.Create(ctx, obj, len(opts.DryRun) > 0)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeObject(w, req, format, http.StatusCreated, st, out)
}

// updateObject runs an update through the resource or its subresource sub.
func updateObject(ctx context.Context, st *registry.Store, sub, name string, objInfo rest.UpdatedObjectInfo, dryRun bool) (runtime.Object, error) {
	if sub != "" {
		return st.UpdateSubresource(ctx, sub, name, objInfo, dryRun)
	}
	return st.Update(ctx, name, objInfo, dryRun)
}

func (s *Server) update(w http.ResponseWriter, req *http.Request, st *registry.Store, sub, name, ns string) {
	if st.UpdateStrategy == nil && sub == "" {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "update"))
		return
	}
	format, si, body, opts, err := s.updateRequest(req, forStore(st))
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	obj, err := s.decodeBody(req.Context(), st, si, body, opts.FieldValidation)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.auditRequest(req, obj, st.GVR.GroupVersion(), st.GVR, sub)
	m, err := meta.Accessor(obj)
	if err != nil {
		s.writeError(w, req, apierrors.NewInternalError(err))
		return
	}
	if err := rest.EnsureObjectNamespaceMatchesRequestNamespace(rest.ExpectedNamespaceForScope(ns, st.Namespaced), m); err != nil {
		s.writeError(w, req, err)
		return
	}
	if err := checkName(obj, name, ns); err != nil {
		s.writeError(w, req, err)
		return
	}
	manager := apply.ManagerOrUserAgent(opts.FieldManager, req.UserAgent())
	dryRun := len(opts.DryRun) > 0
	// The store changes the object it is handed (defaults, system fields):
	// a create after a NotFound starts from a copy of what was decoded.
	var fresh runtime.Object
	createOnUpdate := sub == "" && st.CreateStrategy != nil && st.UpdateStrategy.AllowCreateOnUpdate()
	if createOnUpdate {
		fresh = obj.DeepCopyObject()
	}
	info := s.managed(st, sub, rest.DefaultUpdatedObjectInfo(obj), manager)
	ctx := admissionhook.WithWriteOptions(req.Context(), opts.DryRun, opts.FieldManager, opts.FieldValidation)
	out, err := updateObject(ctx, st, sub, name, info, dryRun)
	code := http.StatusOK
	if createOnUpdate && isNotFoundOf(err, st, name) {
		out, err = s.createOnUpdate(ctx, st, fresh, manager, ns, name, dryRun)
		code = http.StatusCreated
	}
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeObject(w, req, format, code, st, out)
}

// createOnUpdate creates the object a PUT names when there is none and the
// strategy allows it (kube's RBAC roles and bindings, ...): the caller must
// also be allowed to create, as kube's update handler checks, and the object
// is created as a POST creates it, answering 201.
func (s *Server) createOnUpdate(ctx context.Context, st *registry.Store, obj runtime.Object, manager, ns, name string, dryRun bool) (runtime.Object, error) {
	if err := s.authorizeCreate(ctx, st, ns, name); err != nil {
		return nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	rest.WipeObjectMetaSystemFields(m)
	if fm := s.fields.get(st, ""); fm != nil {
		obj = fm.UpdateNoErrors(st.NewFunc(), obj, manager)
	}
	return st.Create(ctx, obj, dryRun)
}
