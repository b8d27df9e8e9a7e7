package api

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
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
	ctx := genericapirequest.WithNamespace(req.Context(), ns)
	req = req.WithContext(ctx)
	format, si, body, err := s.objectRequest(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts := &metav1.CreateOptions{}
	if err := decodeOptions(req, opts, "CreateOptions", func() field.ErrorList { return metav1validation.ValidateCreateOptions(opts) }); err != nil {
		s.writeError(w, req, err)
		return
	}
	gvk := v.Kind()
	obj, got, err := registry.Codecs.DecoderToVersion(si.Serializer, hub(gvk.GroupVersion())).Decode(body, &gvk, v.New())
	if err != nil {
		if got != nil && got.Kind != "" {
			err = apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", got.Kind, got.Version, v.KindName, err))
		} else {
			err = apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v (%s)", v.KindName, err, summarizeData(body, 30)))
		}
		s.writeError(w, req, err)
		return
	}
	if *got != gvk {
		s.writeError(w, req, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%v)",
			got.GroupVersion().String(), gvk.GroupVersion().String())))
		return
	}
	if v.Warning != "" {
		warning.AddWarning(ctx, "", v.Warning)
	}
	out, err := v.Create(ctx, info.Name, obj, opts)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	if out == nil {
		s.writeError(w, req, apierrors.NewInternalError(fmt.Errorf("%s returned no object", v.DiscoveryName())))
		return
	}
	var encodeTo runtime.GroupVersioner = gvk.GroupVersion()
	encoder := registry.Codecs.EncoderForVersion(format.info.Serializer, encodeTo)
	responsewriters.SerializeObject(format.info.MediaType, encoder, w, req, http.StatusCreated, out)
}
