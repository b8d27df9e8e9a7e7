package registry

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingadmissionpolicy"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingadmissionpolicybinding"
)

// MutatingAdmissionPolicyGroupVersion is the one version of the mutating
// admission policy kinds in kube 1.33: alpha, so off unless
// --runtime-config turns it on; kube's plugin enforces them only with the
// MutatingAdmissionPolicy feature gate on as well.
var MutatingAdmissionPolicyGroupVersion = schema.GroupVersion{Group: admissionregistration.GroupName, Version: "v1alpha1"}

// The mutating admission policy resources, by name.
var (
	MutatingAdmissionPoliciesGVR       = MutatingAdmissionPolicyGroupVersion.WithResource("mutatingadmissionpolicies")
	MutatingAdmissionPolicyBindingsGVR = MutatingAdmissionPolicyGroupVersion.WithResource("mutatingadmissionpolicybindings")
)

// MutatingAdmissionPolicyResources returns MutatingAdmissionPolicy and
// MutatingAdmissionPolicyBinding of admissionregistration.k8s.io/v1alpha1
// with kube's strategies (their CEL compiled by kube's environment; the
// requester must be able to read the paramKind and the binding's params,
// authorised by authz), printers and category, under
// AdmissionPolicyResources' rules for served.
func MutatingAdmissionPolicyResources(authz authorizer.Authorizer, served func() *Registry) []*Resource {
	resolve := resolverFunc(func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
		return served().Resolve(gvk)
	})
	policy := mutatingadmissionpolicy.NewStrategy(authz, resolve)
	binding := mutatingadmissionpolicybinding.NewStrategy(authz, mutatingPolicyGetter(served), resolve)
	return []*Resource{
		{
			GVR: MutatingAdmissionPoliciesGVR, KindName: "MutatingAdmissionPolicy", Singular: "mutatingadmissionpolicy",
			Categories:     []string{"api-extensions"},
			NewFunc:        func() runtime.Object { return &admissionregistration.MutatingAdmissionPolicy{} },
			NewListFunc:    func() runtime.Object { return &admissionregistration.MutatingAdmissionPolicyList{} },
			CreateStrategy: policy, UpdateStrategy: policy, DeleteStrategy: policy,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
		{
			GVR: MutatingAdmissionPolicyBindingsGVR, KindName: "MutatingAdmissionPolicyBinding", Singular: "mutatingadmissionpolicybinding",
			Categories:     []string{"api-extensions"},
			NewFunc:        func() runtime.Object { return &admissionregistration.MutatingAdmissionPolicyBinding{} },
			NewListFunc:    func() runtime.Object { return &admissionregistration.MutatingAdmissionPolicyBindingList{} },
			CreateStrategy: binding, UpdateStrategy: binding, DeleteStrategy: binding,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
	}
}

// mutatingPolicyGetter reads a binding's policy from the served registry,
// as kube's policy getter reads it from the policy storage.
type mutatingPolicyGetter func() *Registry

func (g mutatingPolicyGetter) GetMutatingAdmissionPolicy(ctx context.Context, name string) (*admissionregistration.MutatingAdmissionPolicy, error) {
	s := g().Store(MutatingAdmissionPoliciesGVR)
	if s == nil {
		return nil, fmt.Errorf("%s is not served", MutatingAdmissionPoliciesGVR.Resource)
	}
	obj, err := s.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	p, ok := obj.(*admissionregistration.MutatingAdmissionPolicy)
	if !ok {
		return nil, fmt.Errorf("unexpected object type %T", obj)
	}
	return p, nil
}
