package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	kjson "sigs.k8s.io/json"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/apply"
)

// patchTypes are the patch media types served, in kube-apiserver's order.
var patchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}

// customPatchTypes are those of custom resources: no strategic merge.
var customPatchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType)}

func (s *Server) patch(w http.ResponseWriter, req *http.Request, st *registry.Store, sub, name, ns string) {
	if st.UpdateStrategy == nil && sub == "" {
		s.writeError(w, req, apierrors.NewMethodNotSupported(st.GroupResource(), "patch"))
		return
	}
	format, err := negotiateOutputFor(req, forStore(st))
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	pt := requestPatchType(req)
	if pt != types.JSONPatchType && pt != types.MergePatchType && pt != types.StrategicMergePatchType && pt != types.ApplyYAMLPatchType {
		s.writeError(w, req, negotiation.NewUnsupportedMediaTypeError(patchTypes))
		return
	}
	if st.Custom != nil && pt == types.StrategicMergePatchType {
		// Custom objects have no Go type to take merge keys from.
		s.writeError(w, req, negotiation.NewUnsupportedMediaTypeError(customPatchTypes))
		return
	}
	body, err := s.readBody(req)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	s.auditPatch(req, body)
	opts := &metav1.PatchOptions{}
	if err := decodeOptions(req, opts, "PatchOptions", func() field.ErrorList { return metav1validation.ValidatePatchOptions(opts, pt) }); err != nil {
		s.writeError(w, req, err)
		return
	}
	dryRun := len(opts.DryRun) > 0
	ctx := admissionhook.WithWriteOptions(req.Context(), opts.DryRun, opts.FieldManager, opts.FieldValidation)
	if pt == types.ApplyYAMLPatchType {
		a := &applyInfo{
			store: st, fm: s.fields.get(st, sub), patch: body, manager: opts.FieldManager,
			force: opts.Force != nil && *opts.Force, directive: fieldValidation(opts.FieldValidation), name: name, namespace: ns,
		}
		if a.fm == nil {
			s.writeError(w, req, negotiation.NewUnsupportedMediaTypeError(patchTypes[:3]))
			return
		}
		out, created, err := s.patchApply(ctx, st, sub, a, dryRun)
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
	out, err := updateObject(ctx, st, sub, name, info, dryRun)
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
// and the result must keep the name and namespace of the URL. Where kube
// answers a patched object it cannot decode, or Strict's unknown and
// duplicate fields, with a 422 (patch: Invalid value), the answer is the
// specification's 400, worded as a create's (COMPATIBILITY.md).
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

// ReappliesToCurrent: a patch is applied to the current object
// (registry.Reapplied).
func (p *patchInfo) ReappliesToCurrent() bool { return true }

func (p *patchInfo) strict() bool {
	return p.directive == metav1.FieldValidationWarn || p.directive == metav1.FieldValidationStrict
}

func (p *patchInfo) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	gv := p.store.GVR.GroupVersion()
	oldJSON, err := encodeJSON(p.store, old, gv)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var (
		patched    []byte
		strictErrs []error
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
		var schemaObj runtime.Object
		schemaObj, err = p.store.New()
		if err == nil {
			patched, err = apply.StrategicMergePatch(oldJSON, p.patch, schemaObj)
		}
	}
	if err != nil {
		return nil, patchError(err)
	}
	codecs := p.store.Codecs()
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	ser := info.Serializer
	if p.strict() && info.StrictSerializer != nil {
		ser = info.StrictSerializer
	}
	defaultGVK := p.store.GVK()
	obj, _, err := codecs.DecoderToVersion(ser, p.store.Hub()).Decode(patched, &defaultGVK, p.store.NewFunc())
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		if !isStrict || obj == nil {
			return nil, transformDecodeError(p.store.KindName, err, &defaultGVK, patched)
		}
		strictErrs = append(strictErrs, strictErr.Errors()...)
	}
	if len(strictErrs) > 0 {
		if p.directive != metav1.FieldValidationWarn {
			return nil, transformDecodeError(p.store.KindName, runtime.NewStrictDecodingError(strictErrs), &defaultGVK, patched)
		}
		for _, e := range strictErrs {
			warning.AddWarning(ctx, "", e.Error())
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

// encodeJSON is obj in gv as JSON, with the store's codecs.
func encodeJSON(st *registry.Store, obj runtime.Object, gv schema.GroupVersion) ([]byte, error) {
	if st.Custom == nil {
		return runtime.Encode(registry.Codecs.LegacyCodec(gv), obj)
	}
	codecs := st.Codecs()
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	return runtime.Encode(codecs.EncoderForVersion(info.Serializer, gv), obj)
}

// requestPatchType is the patch type the request's Content-Type names.
func requestPatchType(req *http.Request) types.PatchType {
	contentType, _, _ := strings.Cut(req.Header.Get("Content-Type"), ";")
	return types.PatchType(strings.TrimSpace(contentType))
}

// patchError is the Status of a patch that could not be applied, as kube
// answers it: 400 for a malformed patch, 413 for too many operations, 422
// for a JSON patch test that failed.
func patchError(err error) error {
	switch {
	case errors.Is(err, apply.ErrBadPatch):
		return apierrors.NewBadRequest(strings.TrimPrefix(err.Error(), apply.ErrBadPatch.Error()+": "))
	case errors.Is(err, apply.ErrTooManyOperations):
		return apierrors.NewRequestEntityTooLargeError(strings.TrimPrefix(err.Error(), apply.ErrTooManyOperations.Error()+": "))
	case errors.Is(err, apply.ErrPatchFailed):
		return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
			strings.TrimPrefix(err.Error(), apply.ErrPatchFailed.Error()+": "), 0, false)
	}
	return apierrors.NewInternalError(err)
}
