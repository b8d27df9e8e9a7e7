package api

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"

	"github.com/trustplane/trustplane/api/registry"
)

func (s *Server) deleteOptions(req *http.Request) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := s.readBody(req)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		si, err := negotiation.NegotiateInputSerializer(req, false, metainternalversionscheme.Codecs)
		if err != nil {
			return nil, err
		}
		defaultGVK := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
		obj, _, err := metainternalversionscheme.Codecs.DecoderToVersion(si.Serializer, defaultGVK.GroupVersion()).Decode(body, &defaultGVK, opts)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if obj != opts {
			return nil, apierrors.NewBadRequest("decoded object cannot be converted to DeleteOptions")
		}
	} else if err := metainternalversionscheme.ParameterCodec.DecodeParameters(optionsQuery(req), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if errs := metav1validation.ValidateDeleteOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs)
	}
	return opts, nil
}

func (s *Server) delete(w http.ResponseWriter, req *http.Request, st *registry.Store, name string) {
	if st.DeleteStrategy == nil {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "delete"))
		return
	}
	format, err := negotiateOutputFor(req, forStore(st))
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts, err := s.deleteOptions(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	out, done, err := st.Delete(req.Context(), name, opts, len(opts.DryRun) > 0)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	// kube-apiserver answers 200 even when the deletion is only pending
	// (finalizers, graceful deletion), unless the client asked for cascading
	// deletion with the deprecated orphanDependents=false.
	code := http.StatusOK
	//nolint:staticcheck // SA1019: kube-apiserver still honours orphanDependents here.
	if !done && opts.OrphanDependents != nil && !*opts.OrphanDependents {
		code = http.StatusAccepted
	}
	s.writeObject(w, req, format, code, st, out)
}

func (s *Server) deleteCollection(w http.ResponseWriter, req *http.Request, st *registry.Store) {
	if st.NoDeleteCollection {
		// kube-apiserver registers no route for it.
		s.methodNotAllowed(w, req)
		return
	}
	if st.DeleteStrategy == nil {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "deletecollection"))
		return
	}
	format, err := negotiateOutputFor(req, forStore(st))
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	listOpts, err := s.listOptions(req, st)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts, err := s.deleteOptions(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	if _, err := st.DeleteCollection(req.Context(), listOpts, opts, len(opts.DryRun) > 0); err != nil {
		s.writeError(w, req, err)
		return
	}
	// The specification answers a deletecollection with a Status, where
	// kube-apiserver answers the list of what it deleted; client-go's
	// DeleteCollection reads neither, and kubectl deletes one by one
	// (COMPATIBILITY.md).
	s.writeObject(w, req, format, http.StatusOK, st, &metav1.Status{
		Status: metav1.StatusSuccess, Code: http.StatusOK,
		Details: &metav1.StatusDetails{Group: st.GVR.Group, Kind: st.GVR.Resource},
	})
}
