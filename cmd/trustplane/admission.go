package main

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/approval"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/ctbattest"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/signing"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/subjectrestriction"
	saadmission "k8s.io/kubernetes/plugin/pkg/admission/serviceaccount"

	"github.com/trustplane/trustplane/api"
	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
)

// loopbackUser is the identity the node uses to read its own API for
// admission, as kube-apiserver's loopback client does.
const loopbackUser = "system:apiserver"

// admissionChain is the node's admission (registry.Admission): each
// part's steps for a resource, in the order of the parts.
type admissionChain []registry.Admission

func (c admissionChain) For(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.AdmitFunc {
	return chainSteps(c, func(a registry.Admission) []registry.AdmitFunc { return a.For(gvr, kind) })
}

// ForValidate gives each resource the validating steps, after the
// strategy, of the parts that have them (registry.ValidatingAdmission), in
// the order of the parts.
func (c admissionChain) ForValidate(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.ValidateFunc {
	return chainSteps(c, func(v registry.ValidatingAdmission) []registry.ValidateFunc { return v.ForValidate(gvr, kind) })
}

// ForDelete gives each resource the delete steps of the parts that guard
// deletes (registry.DeleteAdmission), in the order of the parts.
func (c admissionChain) ForDelete(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.AdmitDeleteFunc {
	return chainSteps(c, func(d registry.DeleteAdmission) []registry.AdmitDeleteFunc { return d.ForDelete(gvr, kind) })
}

// exempt is the rule for which writes skip the admission policies and
// webhooks that users configure:
//   - The server's own writes (no user in their context: the default
//     namespaces and Service at bootstrap). kube-apiserver makes those
//     through its loopback client, where its policies and webhooks see
//     them, but nothing a user configures may refuse or change what the
//     server needs to start.
//   - The controllers' lease written by a node's component (leaseExempt,
//     controllerslease.go). Every node's controllers stop when their
//     host's renewals fail and no other node may then take it, so a
//     policy or webhook refusing those writes would stop CSR signing,
//     namespace deletion and the rest on every node at once. kube lets
//     its policies and webhooks see kube-controller-manager's lease (its
//     documentation only advises leaving kube-system alone).
//
// The wrappers below apply it to a step; gvr is the step's resource, obj
// the object written (or, for a delete, the stored one).
func exempt(ctx context.Context, gvr schema.GroupVersionResource, obj runtime.Object) bool {
	if _, ok := genericapirequest.UserFrom(ctx); !ok {
		return true
	}
	return leaseExempt(api.FromComponent(ctx), gvr, obj)
}

func userAdmit(gvr schema.GroupVersionResource, step registry.AdmitFunc) registry.AdmitFunc {
	return func(ctx context.Context, obj, old runtime.Object) error {
		if exempt(ctx, gvr, obj) {
			return nil
		}
		return step(ctx, obj, old)
	}
}

func userValidate(gvr schema.GroupVersionResource, step registry.ValidateFunc) registry.ValidateFunc {
	return func(ctx context.Context, obj, old runtime.Object, dryRun bool) error {
		if exempt(ctx, gvr, obj) {
			return nil
		}
		return step(ctx, obj, old, dryRun)
	}
}

func userDelete(gvr schema.GroupVersionResource, step registry.AdmitDeleteFunc) registry.AdmitDeleteFunc {
	return func(ctx context.Context, old runtime.Object, opts *metav1.DeleteOptions, dryRun bool) error {
		if exempt(ctx, gvr, old) {
			return nil
		}
		return step(ctx, old, opts, dryRun)
	}
}

// chainSteps joins, in the order of the parts of c, the steps of the parts
// that have the capability P.
func chainSteps[P, S any](c admissionChain, steps func(P) []S) []S {
	var out []S
	for _, a := range c {
		if p, ok := a.(P); ok {
			out = append(out, steps(p)...)
		}
	}
	return out
}

// plugins are kube's admission plugins the node runs, built before the
// registry so that its chain is whole from the start (For), and
// initialised, as kube-apiserver's plugin initialisers do, once the API
// they read through is bound (start).
type plugins struct {
	// sa is ServiceAccount admission for pods: default serviceAccountName,
	// the account must exist, enforce-mountable-secrets, the projected
	// token volume. An account missing from its informer is looked up
	// directly.
	sa *saadmission.Plugin
	// csr guards CertificateSigningRequests: no node identity (always),
	// then, with an authorizer, who may approve and sign for a signer and
	// no system:masters client certificates through kube-apiserver-client.
	csr []admission.Interface
	// ctb guards ClusterTrustBundles: who may publish for a signer.
	ctb []admission.Interface
	// policies enforce ValidatingAdmissionPolicies on every resource.
	policies *admissionPolicies
	// webhooks call the admission webhooks on every resource; nil
	// without an authorizer (tests of the admission chain alone).
	webhooks *admissionWebhooks
	// maxWebhookResponse is the limit of a webhook's answer
	// (--admission-webhook-max-response-bytes).
	maxWebhookResponse int64
	// reserveLease keeps the controllers' lease for the nodes' own
	// components (leaseRefusal): the node runs the controllers.
	reserveLease bool
}

var (
	podsGR = schema.GroupResource{Resource: "pods"}
	csrGR  = schema.GroupResource{Group: registry.CertificatesGroup, Resource: "certificatesigningrequests"}
	ctbGR  = schema.GroupResource{Group: registry.CertificatesGroup, Resource: "clustertrustbundles"}
)

// newAdmission builds the plugins; authz decides the certificate plugins'
// signer permissions. Without an authorizer only the node subject
// restriction guards CSRs, so that no CSR can ask for a node identity.
// reserveLease says the node runs the controllers (plugins.reserveLease).
func newAdmission(authz authorizer.Authorizer, reserveLease bool) (*plugins, error) {
	p := &plugins{sa: saadmission.NewServiceAccount(), csr: []admission.Interface{admissionhook.NewNodeSubjectRestriction()},
		policies: newAdmissionPolicies(authz), reserveLease: reserveLease}
	if authz == nil {
		return p, nil
	}
	approve, sign, restrict := approval.NewPlugin(), signing.NewPlugin(), subjectrestriction.NewPlugin()
	approve.SetAuthorizer(authz)
	sign.SetAuthorizer(authz)
	attest := ctbattest.NewPlugin()
	attest.SetAuthorizer(authz)
	// The plugin guards ClusterTrustBundles only when they are served; it
	// reads the gate that decides that (--feature-gates ClusterTrustBundle).
	attest.InspectFeatureGates(utilfeature.DefaultFeatureGate)
	for _, pl := range []admission.InitializationValidator{approve, sign, restrict, attest} {
		if err := pl.ValidateInitialization(); err != nil {
			return nil, err
		}
	}
	p.csr = append(p.csr, approve, sign, restrict)
	p.ctb = []admission.Interface{attest}
	webhooks, err := newAdmissionWebhooks(p.policies.objects)
	if err != nil {
		return nil, err
	}
	p.webhooks = webhooks
	return p, nil
}

// For gives each guarded resource its plugins, in every served version,
// and every resource the mutating admission policies and then the
// mutating webhooks, last of the mutating plugins as in kube-apiserver's
// order: they see what the others admitted, and
// the others' validation sees what the webhooks changed. A write with no
// user (the server's own, at bootstrap) is refused by a resource's own
// plugins, which need one, and skips the webhooks.
func (p *plugins) For(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.AdmitFunc {
	var own []admission.Interface
	switch gvr.GroupResource() {
	case podsGR:
		own = []admission.Interface{p.sa}
	case csrGR:
		own = p.csr
	case ctbGR:
		own = p.ctb
	}
	list := own[:len(own):len(own)]
	for _, m := range []admission.Interface{p.policies.mutatingFor(gvr), p.webhooks.mutatingFor(gvr)} {
		if m != nil {
			list = append(list, m)
		}
	}
	if len(list) == 0 {
		return nil
	}
	hook := admissionhook.Hook(p.policies.objects, gvr, kind, list...)
	if len(own) > 0 {
		return []registry.AdmitFunc{hook}
	}
	return []registry.AdmitFunc{userAdmit(gvr, hook)}
}

// ForValidate gives the leases the controllers' lease's reservation
// (when reserveLease) and every resource the admission policies' step,
// then the validating webhooks', after the strategy.
func (p *plugins) ForValidate(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.ValidateFunc {
	var own []registry.ValidateFunc
	if p.reserveLease {
		own, _ = leaseReserve(gvr)
	}
	return slices.Concat(own, p.policies.step(gvr, kind), p.webhooks.step(gvr, kind))
}

// ForDelete gives the leases the reservation's delete step (when
// reserveLease) and every resource the admission policies' delete step,
// then the validating webhooks'.
func (p *plugins) ForDelete(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.AdmitDeleteFunc {
	var own []registry.AdmitDeleteFunc
	if p.reserveLease {
		_, own = leaseReserve(gvr)
	}
	return slices.Concat(own, p.policies.deleteStep(gvr, kind), p.webhooks.deleteStep(gvr, kind))
}

// start initialises the plugins that read the API, over the node's own
// API at url, and starts their informers, which stop with ctx. It runs
// after the listener is bound and before requests are served.
func (p *plugins) start(ctx context.Context, lb *loopback, url string) error {
	cfg, err := lb.config(url, loopbackUser, "system:masters")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	p.sa.SetExternalKubeClientSet(client)
	p.sa.SetExternalKubeInformerFactory(factory)
	if err := p.sa.ValidateInitialization(); err != nil {
		return err
	}
	if err := p.policies.start(ctx, cfg, client, factory); err != nil {
		return err
	}
	if err := p.webhooks.start(ctx, client, factory, p.policies.authz, p.maxWebhookResponse); err != nil {
		return err
	}
	go factory.Start(ctx.Done())
	return nil
}
