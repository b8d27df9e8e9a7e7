package registry

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Virtual is a resource or subresource that answers POST without storing the
// posted object: the reviews (TokenReview, SubjectAccessReview, ...) and
// TokenRequest (serviceaccounts/<name>/token). kube's own REST objects do the
// work behind Create; the API layer decodes, negotiates and encodes.
type Virtual struct {
	// GVR names the resource; for a subresource it is the parent resource
	// (serviceaccounts) and Subresource names the child (token).
	GVR         schema.GroupVersionResource
	Subresource string
	// KindName is the kind posted and returned; RequestGV its group version
	// when it differs from GVR's (TokenRequest is authentication.k8s.io/v1
	// under core serviceaccounts).
	KindName   string
	RequestGV  *schema.GroupVersion
	Singular   string
	Namespaced bool
	// New returns an empty internal object of KindName.
	New func() runtime.Object
	// Create does the work. name is the parent's name for a subresource and
	// empty otherwise. The context carries the user, the namespace and the
	// request info. validate is the node's validating admission of this
	// resource, handed to kube's REST objects as kube-apiserver hands it:
	// they call it once they have checked the request, before they act. It
	// returns the internal object to answer with (201).
	Create func(ctx context.Context, name string, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error)
	// Warning, when set, is sent as a Warning header with every answer
	// (kube's deprecation warning for a deprecated version).
	Warning string

	// validate is the node's validating admission of this resource, set
	// by AddVirtual.
	validate []ValidateFunc
}

// Validation is v's validating admission for one create, as kube's REST
// objects take it (rest.ValidateObjectFunc). kube's ValidatingAdmissionPolicy
// plugin itself leaves out the reviews kube-apiserver excludes from
// admission (TokenReview, the access reviews, SelfSubjectReview), so only
// TokenRequest's policies take effect, as in kube-apiserver, where
// serviceaccounts/token is explicitly admitted.
func (v *Virtual) Validation(dryRun bool) rest.ValidateObjectFunc {
	if len(v.validate) == 0 {
		return nil
	}
	return func(ctx context.Context, obj runtime.Object) error {
		for _, validate := range v.validate {
			if err := validate(ctx, obj, nil, dryRun); err != nil {
				return err
			}
		}
		return nil
	}
}

// Kind is the group version kind posted and returned.
func (v *Virtual) Kind() schema.GroupVersionKind {
	if v.RequestGV != nil {
		return v.RequestGV.WithKind(v.KindName)
	}
	return v.GVR.GroupVersion().WithKind(v.KindName)
}

// DiscoveryName is the name discovery lists: resource or resource/subresource.
func (v *Virtual) DiscoveryName() string {
	if v.Subresource != "" {
		return v.GVR.Resource + "/" + v.Subresource
	}
	return v.GVR.Resource
}

type virtualKey struct {
	gvr schema.GroupVersionResource
	sub string
}

// AddVirtual registers v, with the validating admission of the registry's
// admission chain for it. It is called while wiring, before serving.
func (r *Registry) AddVirtual(v *Virtual) {
	if va, ok := r.adm.(ValidatingAdmission); ok && v.validate == nil {
		v.validate = va.ForValidate(v.GVR, v.Kind())
	}
	if r.virtuals == nil {
		r.virtuals = map[virtualKey]*Virtual{}
	}
	r.virtuals[virtualKey{v.GVR, v.Subresource}] = v
	r.virtualOrder = append(r.virtualOrder, v)
}

// Virtual returns the virtual resource or subresource serving gvr/sub, or nil.
func (r *Registry) Virtual(gvr schema.GroupVersionResource, sub string) *Virtual {
	return r.virtuals[virtualKey{gvr, sub}]
}

// Virtuals returns every virtual resource in registration order, for discovery.
func (r *Registry) Virtuals() []*Virtual { return r.virtualOrder }
