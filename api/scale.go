package api

import (
	"context"
	"fmt"
	"net/http"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/registry/rest"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/apply"
)

// The scale subresource of a custom resource, as kube's apiextensions
// server serves it (registry/customresource ScaleREST): an
// autoscaling/v1 Scale read from the object's replicas paths, and a write
// of one that sets the spec replicas path of the object, through the
// resource's own strategy, validation and admission. A Scale's
// resourceVersion is a precondition on the object's. Its writes are not
// recorded in managedFields (kube maps them to the replicas path).
// Admission of its writes sees Scales (scaleView), as kube's does; kube
// does the same for the scale of its built-in kinds, none of which
// trustplane serves.

var scaleGV = autoscalingv1.SchemeGroupVersion

// scalePatchTypes are the patches a Scale takes (it is a Go type, so
// strategic merge too).
var scalePatchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType)}

// serveScale serves get, update and patch of st's scale subresource.
func (s *Server) serveScale(w http.ResponseWriter, req *http.Request, st *registry.Store, verb, name string) {
	paths := st.Custom.Scale
	ctx := req.Context()
	switch verb {
	case "get":
		format, err := negotiateOutput(req)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		opts := &metav1.GetOptions{ResourceVersion: req.URL.Query().Get("resourceVersion")}
		obj, err := st.Get(ctx, name, opts)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		scale, found, err := paths.ScaleOf(obj.(*unstructured.Unstructured))
		if err == nil && !found {
			err = apierrors.NewInternalError(fmt.Errorf("the spec replicas field %q does not exist", paths.SpecReplicasPath))
		}
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		s.writeScale(w, req, format, scale)
	case "update":
		format, si, body, opts, err := s.updateRequest(req, restrictions{})
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		scale, err := decodeScale(ctx, si, body, opts.FieldValidation)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		if scale.Name != name {
			s.writeError(w, req, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", scale.Name, name)))
			return
		}
		ctx = admissionhook.WithWriteOptions(ctx, opts.DryRun, opts.FieldManager, opts.FieldValidation)
		s.updateScale(w, req, ctx, st, format, name, func(*autoscalingv1.Scale) (*autoscalingv1.Scale, error) { return scale, nil }, len(opts.DryRun) > 0)
	case "patch":
		format, err := negotiateOutput(req)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		pt := requestPatchType(req)
		if pt != types.JSONPatchType && pt != types.MergePatchType && pt != types.StrategicMergePatchType {
			s.writeError(w, req, negotiation.NewUnsupportedMediaTypeError(scalePatchTypes))
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
		ctx = admissionhook.WithWriteOptions(ctx, opts.DryRun, opts.FieldManager, opts.FieldValidation)
		patchScale := func(old *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
			return patchedScale(ctx, old, pt, body, opts.FieldValidation)
		}
		s.updateScale(w, req, ctx, st, format, name, patchScale, len(opts.DryRun) > 0)
	default:
		s.methodNotAllowed(w, req)
	}
}

// updateScale writes the Scale change makes of the current one into the
// object, and answers with the object's new Scale. Admission sees the
// write as kube's does: Scales, of kind autoscaling/v1 Scale, for the
// resource's scale subresource (scaleView).
func (s *Server) updateScale(w http.ResponseWriter, req *http.Request, ctx context.Context, st *registry.Store, format *output, name string,
	change func(*autoscalingv1.Scale) (*autoscalingv1.Scale, error), dryRun bool) {
	paths := st.Custom.Scale
	ctx = admissionhook.WithView(ctx, scaleView(st))
	out, err := st.Update(ctx, name, &scaleUpdate{paths: paths, change: change}, dryRun)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	scale, _, err := paths.ScaleOf(out.(*unstructured.Unstructured))
	if err != nil {
		s.writeError(w, req, apierrors.NewBadRequest(err.Error()))
		return
	}
	s.writeScale(w, req, format, scale)
}

// scaleView is what admission sees of a write through st's scale
// subresource: the custom object's autoscaling/v1 Scale, as kube's
// ScaleREST converts both objects before validating admission (missing
// replicas are 0 there too); the replicas mutating admission leaves in
// it are written back.
func scaleView(st *registry.Store) admissionhook.View {
	paths := st.Custom.Scale
	return admissionhook.View{
		Resource: st.GVR,
		Kind:     scaleGV.WithKind("Scale"),
		Convert: func(obj runtime.Object) (runtime.Object, error) {
			cr, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return nil, apierrors.NewInternalError(fmt.Errorf("the scale of %T", obj))
			}
			scale, _, err := paths.ScaleOf(cr)
			return scale, err
		},
		// The replicas a mutating webhook or policy set, as kube's
		// ScaleREST takes them from the admitted Scale.
		WriteBack: func(view, obj runtime.Object) error {
			scale, ok := view.(*autoscalingv1.Scale)
			cr, isCR := obj.(*unstructured.Unstructured)
			if !ok || !isCR {
				return apierrors.NewInternalError(fmt.Errorf("the scale %T of %T", view, obj))
			}
			return paths.SetReplicas(cr, scale.Spec.Replicas)
		},
	}
}

// writeScale answers with scale in the negotiated format.
func (s *Server) writeScale(w http.ResponseWriter, req *http.Request, format *output, scale *autoscalingv1.Scale) {
	if format.mt.Convert != nil {
		s.writeError(w, req, apierrors.NewBadRequest("no supported transformation for Scale"))
		return
	}
	serializeObject(format.info.MediaType, registry.Codecs.EncoderForVersion(format.info.Serializer, scaleGV), w, req, http.StatusOK, scale)
}

// decodeScale decodes a Scale body under the fieldValidation directive.
func decodeScale(ctx context.Context, si runtime.SerializerInfo, body []byte, directive string) (*autoscalingv1.Scale, error) {
	gvk := scaleGV.WithKind("Scale")
	obj, got, err := decodeValidated(ctx, registry.Codecs, scaleGV, si, body, fieldValidation(directive), gvk, &autoscalingv1.Scale{})
	if err != nil {
		return nil, transformDecodeError("Scale", err, got, body)
	}
	scale, ok := obj.(*autoscalingv1.Scale)
	if !ok || got.GroupVersion() != scaleGV {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", got.GroupVersion(), scaleGV))
	}
	return scale, nil
}

// patchedScale applies a patch to the current Scale, as kube's patch
// handler does to a Scale.
func patchedScale(ctx context.Context, old *autoscalingv1.Scale, pt types.PatchType, patch []byte, directive string) (*autoscalingv1.Scale, error) {
	oldJSON, err := runtime.Encode(registry.Codecs.LegacyCodec(scaleGV), old)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	switch pt {
	case types.JSONPatchType:
		patched, err = apply.JSONPatch(oldJSON, patch)
	case types.MergePatchType:
		patched, err = apply.MergePatch(oldJSON, patch)
	default:
		patched, err = apply.StrategicMergePatch(oldJSON, patch, &autoscalingv1.Scale{})
	}
	if err != nil {
		return nil, patchError(err)
	}
	si, _ := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	return decodeScale(ctx, si, patched, directive)
}

// scaleUpdate is the rest.UpdatedObjectInfo of a scale write: the
// object's Scale, changed, put back into the object.
type scaleUpdate struct {
	paths  *registry.ScalePaths
	change func(*autoscalingv1.Scale) (*autoscalingv1.Scale, error)
}

func (u *scaleUpdate) Preconditions() *metav1.Preconditions { return nil }

// ReappliesToCurrent: the change is made to whatever object is current;
// the Scale's own resourceVersion, if it has one, is the precondition.
func (u *scaleUpdate) ReappliesToCurrent() bool { return true }

func (u *scaleUpdate) UpdatedObject(_ context.Context, oldObj runtime.Object) (runtime.Object, error) {
	cr := oldObj.DeepCopyObject().(*unstructured.Unstructured)
	old, found, err := u.paths.ScaleOf(cr)
	if err != nil {
		return nil, err
	}
	const unset = -2147483648 // kube's signal that the field was not there
	if !found {
		old.Spec.Replicas = unset
	}
	scale, err := u.change(old)
	if err != nil {
		return nil, err
	}
	if scale.Spec.Replicas == unset {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the spec replicas field %q cannot be empty", u.paths.SpecReplicasPath))
	}
	if err := u.paths.SetReplicas(cr, scale.Spec.Replicas); err != nil {
		return nil, err
	}
	cr.SetResourceVersion(scale.ResourceVersion) // "" re-applies to the current object
	return cr, nil
}

var _ rest.UpdatedObjectInfo = (*scaleUpdate)(nil)
