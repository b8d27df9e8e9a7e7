package api

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/registry"
)

func (s *Server) get(w http.ResponseWriter, req *http.Request, st *registry.Store, name string) {
	format, err := negotiateOutputFor(req, forStore(st))
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts := &metav1.GetOptions{}
	if err := decodeOptions(req, opts, "GetOptions", nil); err != nil {
		s.writeError(w, req, err)
		return
	}
	obj, err := st.Get(req.Context(), name, opts)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeObject(w, req, format, http.StatusOK, st, obj)
}

func (s *Server) list(w http.ResponseWriter, req *http.Request, st *registry.Store) {
	opts, err := s.listOptions(req, st)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	// A streaming list (sendInitialEvents with bookmarks) is never a
	// Table, as in kube (watchListEndpointRestrictions): its client ends
	// the list at the bookmark it decodes as the list's kind, which a
	// Table stream never carries, so it would wait forever. The Accept
	// header's next type serves it, or 406.
	format, err := negotiateOutputFor(req, restrictions{noTable: s.isWatchList(opts), encodes: forStore(st).encodes})
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	if info, ok := genericapirequest.RequestInfoFrom(req.Context()); ok && info.Verb == "watch" {
		// ?watch=true, or the legacy /watch/ path.
		opts.Watch = true
		if info.Name != "" {
			// A watch of one object is a watch of its collection for
			// that name, as kube-apiserver serves it.
			nameSel := fields.OneTermEqualSelector("metadata.name", info.Name)
			if opts.FieldSelector == nil || opts.FieldSelector.Empty() {
				opts.FieldSelector = nameSel
			} else if v, found := opts.FieldSelector.RequiresExactMatch("metadata.name"); found && v != info.Name {
				s.writeError(w, req, apierrors.NewBadRequest("fieldSelector metadata.name doesn't match requested name"))
				return
			} else {
				opts.FieldSelector = fields.AndSelectors(opts.FieldSelector, nameSel)
			}
		}
	}
	if opts.Watch {
		s.watch(w, req, st, format, opts)
		return
	}
	page, err := st.ListPage(req.Context(), opts)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeList(w, req, format, st, page)
}

// isWatchList says whether opts ask for a streaming list: kube's
// isListWatchRequest.
func (s *Server) isWatchList(opts *metainternalversion.ListOptions) bool {
	return !s.cfg.NoWatchList && opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.AllowWatchBookmarks
}

// listOptions decodes and validates list parameters as kube-apiserver does,
// converting field selector labels through the scheme.
func (s *Server) listOptions(req *http.Request, st *registry.Store) (*metainternalversion.ListOptions, error) {
	opts := &metainternalversion.ListOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	// Without the WatchList gate, kube refuses sendInitialEvents (422).
	if errs := metainternalversionvalidation.ValidateListOptions(opts, !s.cfg.NoWatchList); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	if opts.FieldSelector != nil {
		gvk := st.GVK()
		sel, err := opts.FieldSelector.Transform(func(label, value string) (string, string, error) {
			return st.Convertor().ConvertFieldLabel(gvk, label, value)
		})
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		opts.FieldSelector = sel
	}
	return opts, nil
}
