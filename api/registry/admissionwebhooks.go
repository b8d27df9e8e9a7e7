package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/mutatingwebhookconfiguration"
	"k8s.io/kubernetes/pkg/registry/admissionregistration/validatingwebhookconfiguration"

	"github.com/trustplane/trustplane/api/webhookclient"
)

// The admission webhook configuration resources, by name.
var (
	ValidatingWebhookConfigurationsGVR = AdmissionRegistrationGroupVersion.WithResource("validatingwebhookconfigurations")
	MutatingWebhookConfigurationsGVR   = AdmissionRegistrationGroupVersion.WithResource("mutatingwebhookconfigurations")
)

// WebhookConfigurationResources returns ValidatingWebhookConfiguration
// and MutatingWebhookConfiguration of admissionregistration.k8s.io/v1,
// with kube's strategies (validation, generation), printers and category,
// plus one rule of trustplane's: a webhook's clientConfig must be a url
// (webhookclient.NoServiceReference), checked on create and update like kube's own
// validation, so that nothing is stored that a node could not call.
func WebhookConfigurationResources() []*Resource {
	validating := withRule{validatingwebhookconfiguration.Strategy, serviceReferences}
	mutating := withRule{mutatingwebhookconfiguration.Strategy, serviceReferences}
	return []*Resource{
		{
			GVR: ValidatingWebhookConfigurationsGVR, KindName: "ValidatingWebhookConfiguration", Singular: "validatingwebhookconfiguration",
			Categories:     []string{"api-extensions"},
			NewFunc:        func() runtime.Object { return &admissionregistration.ValidatingWebhookConfiguration{} },
			NewListFunc:    func() runtime.Object { return &admissionregistration.ValidatingWebhookConfigurationList{} },
			CreateStrategy: validating, UpdateStrategy: validating, DeleteStrategy: validating,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
		{
			GVR: MutatingWebhookConfigurationsGVR, KindName: "MutatingWebhookConfiguration", Singular: "mutatingwebhookconfiguration",
			Categories:     []string{"api-extensions"},
			NewFunc:        func() runtime.Object { return &admissionregistration.MutatingWebhookConfiguration{} },
			NewListFunc:    func() runtime.Object { return &admissionregistration.MutatingWebhookConfigurationList{} },
			CreateStrategy: mutating, UpdateStrategy: mutating, DeleteStrategy: mutating,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
	}
}

// serviceReferences refuses each webhook of a configuration whose client
// config names a Service (webhookclient.NoServiceReference), on create
// and update alike.
func serviceReferences(obj, _ runtime.Object) field.ErrorList {
	var configs []admissionregistration.WebhookClientConfig
	switch c := obj.(type) {
	case *admissionregistration.ValidatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
	case *admissionregistration.MutatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			configs = append(configs, w.ClientConfig)
		}
	}
	var errs field.ErrorList
	for i, cc := range configs {
		if cc.Service != nil {
			errs = append(errs, field.Forbidden(field.NewPath("webhooks").Index(i).Child("clientConfig", "service"), webhookclient.NoServiceReference))
		}
	}
	return errs
}
