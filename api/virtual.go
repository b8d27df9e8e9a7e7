package api

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"

	"github.com/trustplane/trustplane/api/registry"
)

// serveVirtual answers a POST to a resource or subresource that stores
// nothing (reviews, TokenRequest). It follows kube-apiserver's create
// handler: 406/415/413 before any work, CreateOptions from the query, the
// body decoded into the internal version, 201 with the result.
func (s *Server) serveVirtual(w http.ResponseWriter, req *http.Request, v *registry.Virtual, info *genericapirequest.RequestInfo) {
	ns := info.Namespace
	if !v.Namespaced {
		ns = ""
	}
	if v.Namespaced && ns == "" || v.Subresource != "" && info.Name == "" || v.Subresource == "" && info.Name != "" {
		s.notFound(w, req)
		return
	}
	if info.Verb != "create" {
		s.methodNotAllowed(w, req)
		return
	}
	if s.refuseRoute(w, req, info.Verb) {
		return
	}
	ctx := genericapirequest.WithNamespace(req.Context(), ns)
	req = req.WithContext(ctx)
	format, si, body, opts, err := s.createRequest(req, restrictions{noTable: true})
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	gvk := v.Kind()
	obj, got, err := decodeValidated(ctx, registry.Codecs, hub(gvk.GroupVersion()), si, body, opts.FieldValidation, gvk, v.New())
	if err != nil {
		// TokenRequest and TokenReview bodies carry tokens: quote none.
		s.writeError(w, req, transformDecodeError(v.KindName, err, got, nil))
		return
	}
	if *got != gvk {
		s.writeError(w, req, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%v)",
			got.GroupVersion().String(), gvk.GroupVersion().String())))
		return
	}
	s.auditRequest(req, obj, gvk.GroupVersion(), v.GVR, v.Subresource)
	if v.Warning != "" {
		warning.AddWarning(ctx, "", v.Warning)
	}
	out, err := v.Create(ctx, info.Name, obj, v.Validation(len(opts.DryRun) > 0), opts)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	if out == nil {
		s.writeError(w, req, apierrors.NewInternalError(fmt.Errorf("%s returned no object", v.DiscoveryName())))
		return
	}
	s.auditResponse(req, out, gvk.GroupVersion())
	var encodeTo runtime.GroupVersioner = gvk.GroupVersion()
	encoder := registry.Codecs.EncoderForVersion(format.info.Serializer, encodeTo)
	serializeObject(format.info.MediaType, encoder, w, req, http.StatusCreated, out)
}
