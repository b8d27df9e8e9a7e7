package api

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	kjson "sigs.k8s.io/json"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/apply"
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
	if st == nil || sub != "" && st.Subresources[sub] == nil {
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

func (s *Server) get(w http.ResponseWriter, req *http.Request, st *registry.Store, name string) {
	format, err := negotiateOutput(req)
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
	format, err := negotiateOutput(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts, err := s.listOptions(req, st)
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
	out, kvs, err := st.ListVersions(req.Context(), opts)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeList(w, req, format, st, out, kvs)
}

// listOptions decodes and validates list parameters as kube-apiserver does,
// converting field selector labels through the scheme.
func (s *Server) listOptions(req *http.Request, st *registry.Store) (*metainternalversion.ListOptions, error) {
	opts := &metainternalversion.ListOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if errs := metainternalversionvalidation.ValidateListOptions(opts, true); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	if opts.FieldSelector != nil {
		gvk := st.GVK()
		sel, err := opts.FieldSelector.Transform(func(label, value string) (string, string, error) {
			return registry.Scheme.ConvertFieldLabel(gvk, label, value)
		})
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		opts.FieldSelector = sel
	}
	return opts, nil
}

func (s *Server) create(w http.ResponseWriter, req *http.Request, st *registry.Store) {
	if st.CreateStrategy == nil {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "create"))
		return
	}
	format, si, body, opts, err := s.createRequest(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	obj, err := s.decodeBody(req.Context(), st, si, body, opts.FieldValidation)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
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
	out, err := st.Create(req.Context(), obj, len(opts.DryRun) > 0)
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
	format, si, body, err := s.objectRequest(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts := &metav1.UpdateOptions{}
	if err := decodeOptions(req, opts, "UpdateOptions", func() field.ErrorList { return metav1validation.ValidateUpdateOptions(opts) }); err != nil {
		s.writeError(w, req, err)
		return
	}
	obj, err := s.decodeBody(req.Context(), st, si, body, opts.FieldValidation)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
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
	info := s.managed(st, sub, rest.DefaultUpdatedObjectInfo(obj), apply.ManagerOrUserAgent(opts.FieldManager, req.UserAgent()))
	out, err := updateObject(req.Context(), st, sub, name, info, len(opts.DryRun) > 0)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeObject(w, req, format, http.StatusOK, st, out)
}

// patchTypes are the patch media types served, in kube-apiserver's order.
var patchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}

func (s *Server) patch(w http.ResponseWriter, req *http.Request, st *registry.Store, sub, name, ns string) {
	if st.UpdateStrategy == nil && sub == "" {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "patch"))
		return
	}
	format, err := negotiateOutput(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	contentType := req.Header.Get("Content-Type")
	if i := strings.Index(contentType, ";"); i > 0 {
		contentType = contentType[:i]
	}
	pt := types.PatchType(strings.TrimSpace(contentType))
	if pt != types.JSONPatchType && pt != types.MergePatchType && pt != types.StrategicMergePatchType && pt != types.ApplyYAMLPatchType {
		s.writeError(w, req, negotiation.NewUnsupportedMediaTypeError(patchTypes))
		return
	}
	body, err := s.readBody(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	opts := &metav1.PatchOptions{}
	if err := decodeOptions(req, opts, "PatchOptions", func() field.ErrorList { return metav1validation.ValidatePatchOptions(opts, pt) }); err != nil {
		s.writeError(w, req, err)
		return
	}
	dryRun := len(opts.DryRun) > 0
	if pt == types.ApplyYAMLPatchType {
		a := &applyInfo{
			store: st, fm: s.fields.get(st, sub), patch: body, manager: opts.FieldManager,
			force: opts.Force != nil && *opts.Force, directive: fieldValidation(opts.FieldValidation), name: name, namespace: ns,
		}
		if a.fm == nil {
			s.writeError(w, req, negotiation.NewUnsupportedMediaTypeError(patchTypes[:3]))
			return
		}
		out, created, err := s.patchApply(req.Context(), st, sub, a, dryRun)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		code := http.StatusOK
		if created {
			code = http.StatusCreated
		}
		s.writeObject(w, req, format, code, st, out)
		return
	}
	var info rest.UpdatedObjectInfo = &patchInfo{store: st, patchType: pt, patch: body, name: name, namespace: ns, directive: fieldValidation(opts.FieldValidation)}
	info = s.managed(st, sub, info, apply.ManagerOrUserAgent(opts.FieldManager, req.UserAgent()))
	out, err := updateObject(req.Context(), st, sub, name, info, dryRun)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeObject(w, req, format, http.StatusOK, st, out)
}

// patchInfo applies a patch to whatever object is current, so that the
// store's optimistic loop can re-apply it after a conflict. It follows
// kube-apiserver's patch handler: the patch is decoded strictly unless
// fieldValidation is Ignore, unknown fields are warnings (Warn, the default)
// or a 422 (Strict), and the result must keep the name and namespace of the
// URL.
type patchInfo struct {
	store     *registry.Store
	patchType types.PatchType
	patch     []byte
	name      string
	namespace string
	directive string
}

// jsonPatchOp is the shape a JSON patch is strictly decoded into, to find
// unknown fields, as kube-apiserver does.
type jsonPatchOp struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	From  string      `json:"from"`
	Value interface{} `json:"value"`
}

func (p *patchInfo) Preconditions() *metav1.Preconditions { return nil }

func (p *patchInfo) strict() bool {
	return p.directive == metav1.FieldValidationWarn || p.directive == metav1.FieldValidationStrict
}

func (p *patchInfo) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	gv := p.store.GVR.GroupVersion()
	oldJSON, err := runtime.Encode(registry.Codecs.LegacyCodec(gv), old)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var (
		patched    []byte
		strictErrs []error
		invalid    string // the "patch" value shown in a strict decoding 422
	)
	switch p.patchType {
	case types.JSONPatchType:
		if p.strict() {
			var ops []jsonPatchOp
			if strictErrs, err = kjson.UnmarshalStrict(p.patch, &ops); err != nil {
				// kube's message names its own type, handlers.jsonPatchOp.
				msg := strings.ReplaceAll(err.Error(), "api.jsonPatchOp", "handlers.jsonPatchOp")
				return nil, apierrors.NewBadRequest("error decoding patch: " + msg)
			}
			for i, e := range strictErrs {
				strictErrs[i] = fmt.Errorf("json patch %v", e)
			}
		}
		patched, err = apply.JSONPatch(oldJSON, p.patch)
	case types.MergePatchType:
		if p.strict() {
			v := map[string]interface{}{}
			if strictErrs, err = kjson.UnmarshalStrict(p.patch, &v); err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
			}
		}
		patched, err = apply.MergePatch(oldJSON, p.patch)
	case types.StrategicMergePatchType:
		patchMap := map[string]interface{}{}
		if p.strict() {
			strictErrs, err = kjson.UnmarshalStrict(p.patch, &patchMap)
		} else {
			err = kjson.UnmarshalCaseSensitivePreserveInts(p.patch, &patchMap)
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		invalid = fmt.Sprintf("%+v", patchMap)
		var schemaObj runtime.Object
		schemaObj, err = registry.Scheme.New(p.store.GVK())
		if err == nil {
			patched, err = apply.StrategicMergePatch(oldJSON, p.patch, schemaObj)
		}
	}
	switch {
	case errors.Is(err, apply.ErrBadPatch):
		return nil, apierrors.NewBadRequest(strings.TrimPrefix(err.Error(), apply.ErrBadPatch.Error()+": "))
	case errors.Is(err, apply.ErrTooManyOperations):
		return nil, apierrors.NewRequestEntityTooLargeError(strings.TrimPrefix(err.Error(), apply.ErrTooManyOperations.Error()+": "))
	case errors.Is(err, apply.ErrPatchFailed):
		return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
			strings.TrimPrefix(err.Error(), apply.ErrPatchFailed.Error()+": "), 0, false)
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	if invalid == "" {
		invalid = string(patched)
	}
	info, _ := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	ser := info.Serializer
	if p.strict() && info.StrictSerializer != nil {
		ser = info.StrictSerializer
	}
	defaultGVK := p.store.GVK()
	obj, _, err := registry.Codecs.DecoderToVersion(ser, hub(gv)).Decode(patched, &defaultGVK, p.store.NewFunc())
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		if !isStrict || obj == nil {
			return nil, apierrors.NewInvalid(schema.GroupKind{}, "", field.ErrorList{
				field.Invalid(field.NewPath("patch"), string(patched), err.Error())})
		}
		strictErrs = append(strictErrs, strictErr.Errors()...)
	}
	if len(strictErrs) > 0 {
		if p.directive == metav1.FieldValidationWarn {
			for _, e := range strictErrs {
				warning.AddWarning(ctx, "", e.Error())
			}
		} else {
			return nil, apierrors.NewInvalid(schema.GroupKind{}, "", field.ErrorList{
				field.Invalid(field.NewPath("patch"), invalid, runtime.NewStrictDecodingError(strictErrs).Error())})
		}
	}
	// A resourceVersion the patch did not change is no precondition: the
	// store may re-apply the patch to a newer object.
	om, _ := meta.Accessor(old)
	nm, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if nm.GetResourceVersion() == om.GetResourceVersion() {
		nm.SetResourceVersion("")
	}
	if err := rest.EnsureObjectNamespaceMatchesRequestNamespace(rest.ExpectedNamespaceForScope(p.namespace, p.store.Namespaced), nm); err != nil {
		return nil, err
	}
	if err := checkName(obj, p.name, p.namespace); err != nil {
		return nil, err
	}
	return obj, nil
}

// fieldValidation is the fieldValidation directive in effect: Warn unless
// the client chose one.
func fieldValidation(directive string) string {
	if directive == "" {
		return metav1.FieldValidationWarn
	}
	return directive
}

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
	} else if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
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
	format, err := negotiateOutput(req)
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
	format, err := negotiateOutput(req)
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
	out, err := st.DeleteCollection(req.Context(), listOpts, opts, len(opts.DryRun) > 0)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.writeObject(w, req, format, http.StatusOK, st, out)
}

// objectRequest does what every request with an object body starts with:
// negotiate the response format (406 before any work), pick the input
// serializer from Content-Type (415) and read the bounded body (413).
func (s *Server) objectRequest(req *http.Request) (*output, runtime.SerializerInfo, []byte, error) {
	format, err := negotiateOutput(req)
	if err != nil {
		return nil, runtime.SerializerInfo{}, nil, err
	}
	si, err := negotiation.NegotiateInputSerializer(req, false, registry.Codecs)
	if err != nil {
		return nil, runtime.SerializerInfo{}, nil, err
	}
	body, err := s.readBody(req)
	if err != nil {
		return nil, runtime.SerializerInfo{}, nil, err
	}
	return format, si, body, nil
}

// createRequest is objectRequest plus the validated CreateOptions, what
// every POST (stored or virtual resource) starts with.
func (s *Server) createRequest(req *http.Request) (*output, runtime.SerializerInfo, []byte, *metav1.CreateOptions, error) {
	format, si, body, err := s.objectRequest(req)
	if err != nil {
		return nil, si, nil, nil, err
	}
	opts := &metav1.CreateOptions{}
	if err := decodeOptions(req, opts, "CreateOptions", func() field.ErrorList { return metav1validation.ValidateCreateOptions(opts) }); err != nil {
		return nil, si, nil, nil, err
	}
	return format, si, body, opts, nil
}

// decodeOptions decodes the query into a meta options struct and validates
// it, with kube-apiserver's status codes (400 undecodable, 422 invalid).
func decodeOptions(req *http.Request, opts runtime.Object, kind string, validate func() field.ErrorList) error {
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if validate == nil {
		return nil
	}
	if errs := validate(); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	return nil
}

// readBody reads at most MaxRequestBodyBytes; more is 413, as kube-apiserver.
func (s *Server) readBody(req *http.Request) ([]byte, error) {
	defer req.Body.Close()
	limit := s.cfg.MaxRequestBodyBytes
	lr := &io.LimitedReader{R: req.Body, N: limit + 1}
	data, err := io.ReadAll(lr)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unable to read the request body: %v", err))
	}
	if lr.N <= 0 {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
	}
	return data, nil
}

// decodeBody decodes a create or update body into the internal version,
// applying the fieldValidation directive to unknown and duplicate fields.
func (s *Server) decodeBody(ctx context.Context, st *registry.Store, si runtime.SerializerInfo, body []byte, directive string) (runtime.Object, error) {
	if directive == "" {
		directive = metav1.FieldValidationWarn
	}
	ser := si.Serializer
	if (directive == metav1.FieldValidationWarn || directive == metav1.FieldValidationStrict) && si.StrictSerializer != nil {
		ser = si.StrictSerializer
	}
	defaultGVK := st.GVK()
	original := st.NewFunc()
	obj, gvk, err := registry.Codecs.DecoderToVersion(ser, hub(st.GVR.GroupVersion())).Decode(body, &defaultGVK, original)
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		if isStrict && obj != nil && directive == metav1.FieldValidationWarn {
			for _, e := range strictErr.Errors() {
				warning.AddWarning(ctx, "", e.Error())
			}
		} else {
			return nil, transformDecodeError(st.KindName, err, gvk, body)
		}
	}
	if gvk.GroupVersion() != st.GVR.GroupVersion() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%v)",
			gvk.GroupVersion().String(), st.GVR.GroupVersion().String()))
	}
	return obj, nil
}

// transformDecodeError words a decode failure as kube-apiserver does.
func transformDecodeError(kind string, baseErr error, gvk *schema.GroupVersionKind, body []byte) error {
	if gvk != nil && len(gvk.Kind) > 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", gvk.Kind, gvk.Version, kind, baseErr))
	}
	return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v (%s)", kind, baseErr, summarizeData(body, 30)))
}

func summarizeData(data []byte, maxLength int) string {
	switch {
	case len(data) == 0:
		return "<empty>"
	case data[0] == '{':
		if len(data) > maxLength {
			return string(data[:maxLength]) + " ..."
		}
		return string(data)
	default:
		if len(data) > maxLength {
			return hex.EncodeToString(data[:maxLength]) + " ..."
		}
		return hex.EncodeToString(data)
	}
}

// checkName enforces that a PUT body names the object on the URL.
func checkName(obj runtime.Object, name, ns string) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s based on URL) was undeterminable: %v", name, err))
	}
	if m.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), name))
	}
	if ns != "" && m.GetNamespace() != "" && m.GetNamespace() != ns {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the request (%s)", m.GetNamespace(), ns))
	}
	return nil
}
