package registry

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	_ "k8s.io/kubernetes/pkg/apis/admissionregistration/install" // its kinds in Scheme, with v1's defaults and conversions
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicy"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingadmissionpolicybinding"
)

// AdmissionRegistrationGroupVersion is the served version of the
// admission policy kinds.
var AdmissionRegistrationGroupVersion = schema.GroupVersion{Group: admissionregistration.GroupName, Version: "v1"}

// The admission policy resources, by name.
var (
	ValidatingAdmissionPoliciesGVR       = AdmissionRegistrationGroupVersion.WithResource("validatingadmissionpolicies")
	ValidatingAdmissionPolicyBindingsGVR = AdmissionRegistrationGroupVersion.WithResource("validatingadmissionpolicybindings")
)

// AdmissionPolicyResources returns ValidatingAdmissionPolicy (with its
// status subresource) and ValidatingAdmissionPolicyBinding of
// admissionregistration.k8s.io/v1, with kube's strategies, printers and
// category (api-extensions; no short names). Their validation compiles
// every CEL expression with kube's environment, and checks that the
// requester may read the policy's paramKind (and the binding's params)
// with authz, as kube-apiserver's storage does; a policy's new expressions
// are also held to a worst-case cost (costCheckedPolicy).
//
// served is called at validation time, never before: it returns the
// registry clients see (after --runtime-config), whose resources resolve
// a paramKind as kube's discovery-based resolver does, and whose policy
// store the binding strategy reads a binding's policy from.
func AdmissionPolicyResources(authz authorizer.Authorizer, served func() *Registry) []*Resource {
	resolve := resolverFunc(func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
		return served().Resolve(gvk)
	})
	policy := validatingadmissionpolicy.NewStrategy(authz, resolve)
	checked := costCheckedPolicy(policy)
	binding := validatingadmissionpolicybinding.NewStrategy(authz, policyGetter(served), resolve)
	return []*Resource{
		{
			GVR: ValidatingAdmissionPoliciesGVR, KindName: "ValidatingAdmissionPolicy", Singular: "validatingadmissionpolicy",
			Categories:     []string{"api-extensions"},
			NewFunc:        func() runtime.Object { return &admissionregistration.ValidatingAdmissionPolicy{} },
			NewListFunc:    func() runtime.Object { return &admissionregistration.ValidatingAdmissionPolicyList{} },
			CreateStrategy: checked, UpdateStrategy: checked, DeleteStrategy: policy,
			// status.typeChecking is written by the status controller.
			Subresources:   map[string]rest.RESTUpdateStrategy{"status": validatingadmissionpolicy.NewStatusStrategy(policy)},
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
		{
			GVR: ValidatingAdmissionPolicyBindingsGVR, KindName: "ValidatingAdmissionPolicyBinding", Singular: "validatingadmissionpolicybinding",
			Categories:     []string{"api-extensions"},
			NewFunc:        func() runtime.Object { return &admissionregistration.ValidatingAdmissionPolicyBinding{} },
			NewListFunc:    func() runtime.Object { return &admissionregistration.ValidatingAdmissionPolicyBindingList{} },
			CreateStrategy: binding, UpdateStrategy: binding, DeleteStrategy: binding,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
	}
}

// resolverFunc is kube's resolver.ResourceResolver as a function.
type resolverFunc func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error)

func (f resolverFunc) Resolve(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	return f(gvk)
}

// policyGetter reads a binding's policy from the served registry, as
// kube's DefaultPolicyGetter reads it from the policy storage.
type policyGetter func() *Registry

func (g policyGetter) GetValidatingAdmissionPolicy(ctx context.Context, name string) (*admissionregistration.ValidatingAdmissionPolicy, error) {
	s := g().Store(ValidatingAdmissionPoliciesGVR)
	if s == nil {
		return nil, fmt.Errorf("%s is not served", ValidatingAdmissionPoliciesGVR.Resource)
	}
	obj, err := s.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	p, ok := obj.(*admissionregistration.ValidatingAdmissionPolicy)
	if !ok {
		return nil, fmt.Errorf("unexpected object type %T", obj)
	}
	return p, nil
}

// Resolve returns the resource that serves gvk in r, not a subresource,
// as kube's discovery resolver finds it among the served resources; a
// kind r does not serve is a NoKindMatchError.
func (r *Registry) Resolve(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	for _, s := range r.Stores() {
		if s.GVK() == gvk {
			return s.GVR, nil
		}
	}
	for _, v := range r.virtualOrder {
		if v.Subresource == "" && v.Kind() == gvk {
			return v.GVR, nil
		}
	}
	return schema.GroupVersionResource{}, &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
}
