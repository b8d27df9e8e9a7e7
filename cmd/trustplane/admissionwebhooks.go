package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	webhookinit "k8s.io/apiserver/pkg/admission/plugin/webhook/initializer"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/webhookclient"
)

// admissionWebhooks are kube's two admission webhook plugins, which call
// the webhooks that Mutating- and ValidatingWebhookConfigurations name,
// on the node that admits the write (the leader, which runs every
// store's admission), with the request kube-apiserver would send.
// kube's plugins keep the configuration kinds themselves out of every
// webhook's reach; here the reviews kube keeps out of CEL admission are
// kept out of the webhooks' too (excludedFromAdmission): a TokenReview
// carries the token it reviews, which no webhook may see.
type admissionWebhooks struct {
	mutating   *mutating.Plugin
	validating *validating.Plugin
	// objects create and convert the objects the webhooks are sent, for
	// every served kind and version (matchPolicy Equivalent).
	objects admission.ObjectInterfaces
}

// newAdmissionWebhooks builds the plugins, which create and convert
// objects with objects.
func newAdmissionWebhooks(objects admission.ObjectInterfaces) (*admissionWebhooks, error) {
	m, err := mutating.NewMutatingWebhook(nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mutating.PluginName, err)
	}
	v, err := validating.NewValidatingAdmissionWebhook(nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", validating.PluginName, err)
	}
	return &admissionWebhooks{mutating: m, validating: v, objects: objects}, nil
}

// mutatingFor is the mutating plugin for gvr's writes, or nil when gvr is
// kept out of admission.
func (w *admissionWebhooks) mutatingFor(gvr schema.GroupVersionResource) admission.Interface {
	if w == nil || excludedFromAdmission(gvr) {
		return nil
	}
	// kube's audit wrapper copies the plugin's annotations (the patches
	// it applied) into the request's audit event.
	return admission.WithAudit(w.mutating)
}

// step is the validating plugin's step of gvr's validating admission,
// after the strategy and the admission policies, as kube-apiserver orders
// ValidatingAdmissionWebhook after ValidatingAdmissionPolicy. The
// server's own writes (no user) skip it, as they skip the policies.
func (w *admissionWebhooks) step(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.ValidateFunc {
	if w == nil || excludedFromAdmission(gvr) {
		return nil
	}
	return []registry.ValidateFunc{userValidate(gvr, admissionhook.HookValidate(w.objects, gvr, kind, admission.WithAudit(w.validating)))}
}

// deleteStep is the webhooks' step of gvr's delete admission, with the
// object as stored, under step's rules: the mutating webhooks are called
// as kube calls them on a delete (a patch is refused), then the
// validating ones.
func (w *admissionWebhooks) deleteStep(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.AdmitDeleteFunc {
	if w == nil || excludedFromAdmission(gvr) {
		return nil
	}
	return []registry.AdmitDeleteFunc{userDelete(gvr, admissionhook.HookDelete(w.objects, gvr, kind, admission.WithAudit(w.mutating), admission.WithAudit(w.validating)))}
}

// start initialises both plugins as kube-apiserver's plugin initialisers
// do: the generic one (the loopback client, whose namespaces the
// namespaceSelector reads, the informers of the configurations, the
// authorizer of matchConditions' authorizer library, the feature gates),
// then the webhook one, with trustplane's service resolver and response
// limit (webhookclient). The caller starts factory afterwards.
func (w *admissionWebhooks) start(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory, authz authorizer.Authorizer, maxResponseBytes int64) error {
	if w == nil {
		return nil
	}
	generic := initializer.New(client, nil, factory, authz, utilfeature.DefaultFeatureGate, ctx.Done(), nil)
	hooks := webhookinit.NewPluginInitializer(webhookclient.Limit(maxResponseBytes), webhookclient.Services{})
	for name, p := range map[string]admission.InitializationValidator{mutating.PluginName: w.mutating, validating.PluginName: w.validating} {
		generic.Initialize(p.(admission.Interface))
		hooks.Initialize(p.(admission.Interface))
		if err := p.ValidateInitialization(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
