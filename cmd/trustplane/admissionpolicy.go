package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/kubernetes/pkg/kubeapiserver/admission/exclusion"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
)

// admissionPolicies is the node's side of CEL admission policies
// (ValidatingAdmissionPolicy, MutatingAdmissionPolicy and their
// bindings): their stores, whose strategies resolve a paramKind against
// what the node serves, which is only known once --runtime-config has
// been applied (serving), and kube's two policy plugins, which enforce
// them on every write.
type admissionPolicies struct {
	served atomic.Pointer[registry.Registry]
	// plugin is kube's plugin; nil without an authorizer (tests of the
	// admission chain alone).
	plugin *validatingpolicy.Plugin
	// mutating is kube's MutatingAdmissionPolicy plugin, which does
	// nothing unless the MutatingAdmissionPolicy gate is on; nil without
	// an authorizer.
	mutating *mutatingpolicy.Plugin
	authz    authorizer.Authorizer
	// objects create and convert the objects the plugins see, over the
	// served registry.
	objects admission.ObjectInterfaces
}

// newAdmissionPolicies builds kube's plugin, authorising its CEL
// authorizer library calls with authz.
func newAdmissionPolicies(authz authorizer.Authorizer) *admissionPolicies {
	p := &admissionPolicies{authz: authz}
	p.objects = admissionhook.NewObjectInterfaces(registry.Scheme, func() admissionhook.Resources {
		if r := p.served.Load(); r != nil {
			return r
		}
		return nil
	})
	if authz != nil {
		p.plugin = validatingpolicy.NewPlugin(nil)
		p.mutating = mutatingpolicy.NewPlugin(nil)
	}
	return p
}

// resources are the admission policy resources, validating and mutating,
// authorising paramKind and paramRef with the node's authorizer.
func (p *admissionPolicies) resources() []*registry.Resource {
	return append(registry.AdmissionPolicyResources(p.authz, p.served.Load), registry.MutatingAdmissionPolicyResources(p.authz, p.served.Load)...)
}

// mutatingFor is the MutatingAdmissionPolicy plugin for gvr's writes, or
// nil when gvr is kept out of admission. kube orders it before the
// mutating webhooks.
func (p *admissionPolicies) mutatingFor(gvr schema.GroupVersionResource) admission.Interface {
	if p.mutating == nil || excludedFromAdmission(gvr) {
		return nil
	}
	return admission.WithAudit(p.mutating)
}

// serving records the registry clients see, before the API serves it.
func (p *admissionPolicies) serving(reg *registry.Registry) *registry.Registry {
	p.served.Store(reg)
	return reg
}

// step is the plugin's step of gvr's validating admission: every served
// resource has one, after its strategy, as kube-apiserver runs
// ValidatingAdmissionPolicy after the strategy and the other plugins. kube's
// plugin ignores the resources kube-apiserver excludes from admission
// (the reviews), matches the binding and policy, and answers a denial with
// its own Status error (422 Invalid "ValidatingAdmissionPolicy 'p' with
// binding 'b' denied request: ..."), which is passed on unchanged. A write
// with no user in its context is the server's own (the default namespaces
// and Service at bootstrap): kube-apiserver makes those through its
// loopback client, so they pass its policies; here they skip them.
func (p *admissionPolicies) step(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.ValidateFunc {
	if p.plugin == nil || excludedFromAdmission(gvr) {
		return nil
	}
	// kube's audit wrapper copies the plugin's annotations (auditAnnotations,
	// the Audit action's validation_failure) into the request's audit event.
	return []registry.ValidateFunc{userValidate(gvr, admissionhook.HookValidate(p.objects, gvr, kind, admission.WithAudit(p.plugin)))}
}

// excludedFromAdmission reports the resources kube-apiserver keeps out of
// admission (the reviews): the plugin would ignore them anyway, and a
// review, whose REST object copies the request for its validation, is
// spared the copy and the attributes.
func excludedFromAdmission(gvr schema.GroupVersionResource) bool {
	return slices.Contains(exclusion.Excluded(), gvr.GroupResource())
}

// deleteStep is the plugin's step of gvr's delete admission, with the
// object as stored, under step's rules.
func (p *admissionPolicies) deleteStep(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.AdmitDeleteFunc {
	if p.plugin == nil {
		return nil
	}
	return []registry.AdmitDeleteFunc{userDelete(gvr, admissionhook.HookDelete(p.objects, gvr, kind, admission.WithAudit(p.plugin)))}
}

// restMapperReset is how often kube-apiserver forgets the discovery its
// admission REST mapper cached (its admission post-start hook).
const restMapperReset = 30 * time.Second

// start initialises the plugin as kube-apiserver's generic plugin
// initializer does (initializer.New), over the node's loopback client and
// shared informer factory, whose Start the caller calls afterwards; the
// plugin's informers, policy source and REST mapper resets stop with ctx,
// its drained notification.
func (p *admissionPolicies) start(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, factory informers.SharedInformerFactory) error {
	if p.plugin == nil {
		return nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", validatingpolicy.PluginName, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	go wait.Until(mapper.Reset, restMapperReset, ctx.Done())
	init := initializer.New(client, dyn, factory, p.authz, utilfeature.DefaultFeatureGate, ctx.Done(), mapper)
	init.Initialize(p.plugin)
	init.Initialize(p.mutating)
	// kube's own initializer hands the plugins the resources excluded
	// from admission (k8s.io/kubernetes/pkg/controlplane/apiserver/admission).
	p.plugin.SetExcludedAdmissionResources(exclusion.Excluded())
	p.mutating.SetExcludedAdmissionResources(exclusion.Excluded())
	if err := p.plugin.ValidateInitialization(); err != nil {
		return fmt.Errorf("%s: %w", validatingpolicy.PluginName, err)
	}
	if err := p.mutating.ValidateInitialization(); err != nil {
		return fmt.Errorf("%s: %w", mutatingpolicy.PluginName, err)
	}
	return nil
}
