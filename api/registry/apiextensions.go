package registry

import (
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresourcedefinition"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
)

func init() {
	// The internal CustomResourceDefinition and its versions, with
	// apiextensions' conversions and defaults.
	apiextensionsinstall.Install(Scheme)
}

// CustomResourceDefinitionsGVR is apiextensions.k8s.io/v1
// customresourcedefinitions.
var CustomResourceDefinitionsGVR = schema.GroupVersionResource{Group: apiextensions.GroupName, Version: "v1", Resource: "customresourcedefinitions"}

// CustomResourceDefinitionResources returns CustomResourceDefinition as
// kube-apiserver's apiextensions server serves it: cluster-scoped, short
// names crd and crds, category api-extensions, apiextensions' own
// strategies (structural schema checks, the estimated cost of validation
// rules, names and versions, with kube's messages), its status
// subresource, and its deletion: the first delete marks the definition
// Terminating with the customresourcecleanup finalizer, which the cleanup
// controller removes once the definition's objects are gone.
func CustomResourceDefinitionResources() []*Resource {
	strategy := customresourcedefinition.NewStrategy(Scheme)
	return []*Resource{{
		GVR: CustomResourceDefinitionsGVR, KindName: "CustomResourceDefinition", Singular: "customresourcedefinition",
		ShortNames:     []string{"crd", "crds"},
		Categories:     []string{"api-extensions"},
		NewFunc:        func() runtime.Object { return &apiextensions.CustomResourceDefinition{} },
		NewListFunc:    func() runtime.Object { return &apiextensions.CustomResourceDefinitionList{} },
		CreateStrategy: strategy, UpdateStrategy: strategy, DeleteStrategy: strategy,
		Subresources:   map[string]rest.RESTUpdateStrategy{"status": customresourcedefinition.NewStatusStrategy(Scheme)},
		GetAttrs:       customresourcedefinition.GetAttrs,
		TableConvertor: rest.NewDefaultTableConvertor(apiextensions.Resource("customresourcedefinitions")),
		Finalizers:     crdCleanupPending,
		OnDeleting:     markCRDTerminating,
	}}
}

// crdCleanupPending holds the first deletion of a definition for the
// cleanup finalizer, which markCRDTerminating then adds (kube's CRD REST
// Delete adds it whatever the options say).
func crdCleanupPending(obj runtime.Object) []string {
	crd := obj.(*apiextensions.CustomResourceDefinition)
	if crd.DeletionTimestamp == nil || apiextensions.CRDHasFinalizer(crd, apiextensions.CustomResourceCleanupFinalizer) {
		return []string{apiextensions.CustomResourceCleanupFinalizer}
	}
	return nil
}

// markCRDTerminating is what kube's CRD REST Delete writes on the first
// delete: the cleanup finalizer and the Terminating condition.
func markCRDTerminating(obj runtime.Object) {
	crd := obj.(*apiextensions.CustomResourceDefinition)
	if !apiextensions.CRDHasFinalizer(crd, apiextensions.CustomResourceCleanupFinalizer) {
		crd.Finalizers = append(crd.Finalizers, apiextensions.CustomResourceCleanupFinalizer)
	}
	apiextensions.SetCRDCondition(crd, apiextensions.CustomResourceDefinitionCondition{
		Type:    apiextensions.Terminating,
		Status:  apiextensions.ConditionTrue,
		Reason:  "InstanceDeletionPending",
		Message: "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
	})
}
