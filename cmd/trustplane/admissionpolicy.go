package main

import (
	"sync/atomic"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/trustplane/trustplane/api/registry"
)

// admissionPolicies is the node's side of CEL admission policies
// (ValidatingAdmissionPolicy and its bindings): their stores, whose
// strategies resolve a paramKind against what the node serves, which is
// only known once --runtime-config has been applied (serving).
type admissionPolicies struct {
	served atomic.Pointer[registry.Registry]
}

// resources are the two admission policy resources, authorising
// paramKind and paramRef with authz.
func (p *admissionPolicies) resources(authz authorizer.Authorizer) []*registry.Resource {
	return registry.AdmissionPolicyResources(authz, p.served.Load)
}

// serving records the registry clients see, before the API serves it.
func (p *admissionPolicies) serving(reg *registry.Registry) *registry.Registry {
	p.served.Store(reg)
	return reg
}
