package api

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/registry"
)

// hub is the internal version every object is handled in.
func hub(gv schema.GroupVersion) schema.GroupVersion {
	return schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}
}

// serveResource dispatches /api/... and /apis/... requests.
func (s *Server) serveResource(w http.ResponseWriter, req *http.Request) {
	// The RequestInfo filter has parsed the path already; parse it here only
	// when the handler is used without the filter chain.
	info, ok := genericapirequest.RequestInfoFrom(req.Context())
	if !ok {
		var err error
		if info, err = s.infos.NewRequestInfo(req); err != nil {
			s.writeError(w, req, apierrors.NewBadRequest(err.Error()))
			return
		}
		req = req.WithContext(genericapirequest.WithRequestInfo(req.Context(), info))
	}
	ctx := req.Context()
	if !info.IsResourceRequest {
		s.serveDiscovery(w, req, info)
		return
	}
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	if v := s.reg.Virtual(gvr, info.Subresource); v != nil {
		s.serveVirtual(w, req, v, info)
		return
	}
	st := s.reg.Store(gvr)
	sub := info.Subresource
	if st == nil || sub != "" && st.Subresources[sub] == nil && !customScale(st, sub) {
		if !s.servesGroup(gvr.Group) {
			pageNotFound(w, req)
			return
		}
		s.notFound(w, req)
		return
	}
	ns := info.Namespace
	if !st.Namespaced {
		// RequestInfo reports a namespace's own name as its namespace.
		if ns != "" && !(st.GVR.Resource == "namespaces" && ns == info.Name) {
			s.notFound(w, req)
			return
		}
		ns = ""
	}
	// kube-apiserver installs go-restful routes per path and method: a path
	// it has no route for is a 404, a method the path has no route for is
	// go-restful's 405. Across namespaces only list and watch are routed;
	// an item path takes no POST, a collection path no PUT or PATCH.
	if st.Namespaced && ns == "" && info.Name != "" {
		s.notFound(w, req)
		return
	}
	if st.Namespaced && ns == "" && info.Verb != "list" && info.Verb != "watch" ||
		info.Verb == "create" && info.Name != "" ||
		(info.Verb == "update" || info.Verb == "patch") && info.Name == "" {
		s.methodNotAllowed(w, req)
		return
	}
	if sub == "" && s.refuseRoute(w, req, info.Verb) {
		return
	}
	if st.Custom != nil && sub != "scale" && s.refuseCustom(w, req, st, info.Verb) {
		return
	}
	ctx = genericapirequest.WithNamespace(ctx, ns)
	req = req.WithContext(ctx)
	if st.ReadOnly && info.Verb != "get" && info.Verb != "list" {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), info.Verb))
		return
	}
	if err := s.refuseLocalRead(req, info.Verb); err != nil {
		s.writeError(w, req, err)
		return
	}
	if sub != "" {
		// A subresource serves get, update and patch of one object.
		switch {
		case info.Name == "":
			s.notFound(w, req)
		case !st.Serves(sub, info.Verb):
			s.methodNotAllowed(w, req)
		case s.refuseRoute(w, req, info.Verb):
		case customScale(st, sub):
			s.serveScale(w, req, st, info.Verb, info.Name)
		case info.Verb == "get":
			s.get(w, req, st, info.Name)
		case info.Verb == "update":
			s.update(w, req, st, sub, info.Name, ns)
		case info.Verb == "patch":
			s.patch(w, req, st, sub, info.Name, ns)
		default:
			s.methodNotAllowed(w, req)
		}
		return
	}
	switch info.Verb {
	case "get":
		s.get(w, req, st, info.Name)
	case "list", "watch":
		s.list(w, req, st)
	case "create":
		s.create(w, req, st)
	case "update":
		s.update(w, req, st, "", info.Name, ns)
	case "patch":
		s.patch(w, req, st, "", info.Name, ns)
	case "delete":
		s.delete(w, req, st, info.Name)
	case "deletecollection":
		s.deleteCollection(w, req, st)
	default:
		// watch arrives with the watch cache.
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), info.Verb))
	}
}

// refuseCustom answers what kube's apiextensions server refuses of a
// custom resource before its handlers run: a create while the definition
// is terminating (405). (A format custom objects have no encoding in is
// the handlers' 406: they negotiate only what the resource encodes,
// forStore.) It reports whether it answered.
func (s *Server) refuseCustom(w http.ResponseWriter, req *http.Request, st *registry.Store, verb string) bool {
	if verb == "create" && st.Custom.Terminating {
		err := apierrors.NewMethodNotSupported(st.GroupResource(), verb)
		err.ErrStatus.Message = fmt.Sprintf("%v not allowed while custom resource definition is terminating", verb)
		s.writeError(w, req, err)
		return true
	}
	return false
}

// customScale reports whether sub is st's scale subresource, which only
// custom resources serve here.
func customScale(st *registry.Store, sub string) bool {
	return sub == "scale" && st.Custom != nil && st.Custom.Scale != nil
}
