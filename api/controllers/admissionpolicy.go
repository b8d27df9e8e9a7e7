package controllers

import (
	"context"
	"fmt"

	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/controller/validatingadmissionpolicystatus"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
)

// ValidatingAdmissionPolicyStatusController type-checks every
// ValidatingAdmissionPolicy and writes the warnings, with their field
// paths, to status.typeChecking.
const ValidatingAdmissionPolicyStatusController = "validatingadmissionpolicy-status-controller"

// policyStatusWorkers is kube-controller-manager's default
// --concurrent-validating-admission-policy-status-syncs.
const policyStatusWorkers = 5

// admissionPolicyControllers is kube-controller-manager's
// validatingadmissionpolicy-status-controller, built as its
// startValidatingAdmissionPolicyStatusController builds it: a type checker
// that resolves a matched kind to its resource with a discovery REST
// mapper and to its schema from kube's generated OpenAPI definitions, then
// from the API's own OpenAPI v3. kube also knows the apiextensions types;
// trustplane serves no CustomResourceDefinitions, so they are left out.
func (k *Kube) admissionPolicyControllers(cl *clients, factory informers.SharedInformerFactory) ([]runnable, error) {
	id := ControllerIdentity(ValidatingAdmissionPolicyStatusController)
	cfg, err := cl.configFor(id, ValidatingAdmissionPolicyStatusController)
	if err != nil {
		return nil, err
	}
	client, err := cl.forIdentity(id, ValidatingAdmissionPolicyStatusController)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ValidatingAdmissionPolicyStatusController, err)
	}
	schemas := resolver.NewDefinitionsSchemaResolver(generatedopenapi.GetOpenAPIDefinitions, k8sscheme.Scheme).
		Combine(&resolver.ClientDiscoveryResolver{Discovery: disc})
	checker := &validatingpolicy.TypeChecker{
		SchemaResolver: schemas,
		RestMapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
	}
	c, err := validatingadmissionpolicystatus.NewController(factory.Admissionregistration().V1().ValidatingAdmissionPolicies(),
		client.AdmissionregistrationV1().ValidatingAdmissionPolicies(), checker)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ValidatingAdmissionPolicyStatusController, err)
	}
	return []runnable{{ValidatingAdmissionPolicyStatusController, func(ctx context.Context) { c.Run(ctx, policyStatusWorkers) }}}, nil
}
