package authz

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	authorizationapi "k8s.io/kubernetes/pkg/apis/authorization"
	"k8s.io/kubernetes/pkg/registry/authorization/localsubjectaccessreview"
	"k8s.io/kubernetes/pkg/registry/authorization/selfsubjectaccessreview"
	"k8s.io/kubernetes/pkg/registry/authorization/selfsubjectrulesreview"
	"k8s.io/kubernetes/pkg/registry/authorization/subjectaccessreview"

	"github.com/trustplane/trustplane/api/registry"
)

// creater is the part of kube's review REST objects the API calls.
type creater interface {
	// Create answers the review in obj for the user in ctx; it stores nothing.
	Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error)
}

// Reviews returns the access review resources of authorization.k8s.io/v1,
// answered by kube's own REST objects with this authorizer.
func (a *Authorizer) Reviews() []*registry.Virtual {
	gv := schema.GroupVersion{Group: authorizationapi.GroupName, Version: "v1"}
	review := func(resource, kind, singular string, namespaced bool, newObj func() runtime.Object, r creater) *registry.Virtual {
		return &registry.Virtual{
			GVR: gv.WithResource(resource), KindName: kind, Singular: singular, Namespaced: namespaced, New: newObj,
			Create: func(ctx context.Context, _ string, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
				return r.Create(ctx, obj, validate, opts)
			},
		}
	}
	return []*registry.Virtual{
		review("localsubjectaccessreviews", "LocalSubjectAccessReview", "localsubjectaccessreview", true,
			func() runtime.Object { return &authorizationapi.LocalSubjectAccessReview{} }, localsubjectaccessreview.NewREST(a)),
		review("selfsubjectaccessreviews", "SelfSubjectAccessReview", "selfsubjectaccessreview", false,
			func() runtime.Object { return &authorizationapi.SelfSubjectAccessReview{} }, selfsubjectaccessreview.NewREST(a)),
		review("selfsubjectrulesreviews", "SelfSubjectRulesReview", "selfsubjectrulesreview", false,
			func() runtime.Object { return &authorizationapi.SelfSubjectRulesReview{} }, selfsubjectrulesreview.NewREST(a)),
		review("subjectaccessreviews", "SubjectAccessReview", "subjectaccessreview", false,
			func() runtime.Object { return &authorizationapi.SubjectAccessReview{} }, subjectaccessreview.NewREST(a)),
	}
}
