package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/approval"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/ctbattest"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/signing"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/subjectrestriction"
	saadmission "k8s.io/kubernetes/plugin/pkg/admission/serviceaccount"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/certs"
)

// loopbackUser is the identity the node uses to read its own API for
// admission, as kube-apiserver's loopback client does.
const loopbackUser = "system:apiserver"

// loopbackConfig is a client configuration for this node's own API, acting
// as user in groups with a client certificate issued in memory.
func loopbackConfig(ca *certs.CA, url, user string, groups ...string) (*rest.Config, error) {
	cert, key, err := ca.Issue(certs.Request{CommonName: user, Organization: groups, Client: true})
	if err != nil {
		return nil, fmt.Errorf("loopback certificate for %s: %w", user, err)
	}
	return &rest.Config{
		Host:            url,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: cert, KeyData: key},
		QPS:             200, Burst: 400,
		UserAgent: "trustplane/" + user,
	}, nil
}

// setupAdmission installs kube's admission plugins on the stores they
// guard and starts the informers they read, over the node's own API at url.
// authz decides the certificate plugins' signer permissions; without one
// those plugins are not installed.
// It runs after the listener is bound and before requests are served; the
// informers stop with ctx.
func setupAdmission(ctx context.Context, w *wiring, url string, authz authorizer.Authorizer) error {
	cfg, err := loopbackConfig(w.ca, url, loopbackUser, "system:masters")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)

	// ServiceAccount admission for pods: default serviceAccountName, the
	// account must exist, enforce-mountable-secrets, the projected token
	// volume. An account missing from the informer is looked up directly.
	sa := saadmission.NewServiceAccount()
	sa.SetExternalKubeClientSet(client)
	sa.SetExternalKubeInformerFactory(factory)
	if err := sa.ValidateInitialization(); err != nil {
		return err
	}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	w.reg.Store(pods).Admit = admissionhook.Hook(registry.Scheme, pods, pods.GroupVersion().WithKind("Pod"), sa)

	if err := certificateAdmission(w.reg, authz); err != nil {
		return err
	}

	go factory.Start(ctx.Done())
	return nil
}

// certificateAdmission installs kube's certificate admission plugins: who
// may approve (approve on signers) and sign (sign on signers) a CSR, no
// system:masters client certificates through kube-apiserver-client, and who
// may publish a ClusterTrustBundle for a signer (attest on signers). With
// no authorizer only the node subject restriction is installed; it always
// is, so that no CSR can ask for a node identity.
func certificateAdmission(reg *registry.Registry, authz authorizer.Authorizer) error {
	nodeSubject := admissionhook.NewNodeSubjectRestriction()
	if authz == nil {
		for _, st := range reg.Stores() {
			if st.GVR.Group == registry.CertificatesGroup && st.GVR.Resource == "certificatesigningrequests" {
				st.Admit = admissionhook.Hook(registry.Scheme, st.GVR, st.GVK(), nodeSubject)
			}
		}
		return nil
	}
	approve, sign, restrict := approval.NewPlugin(), signing.NewPlugin(), subjectrestriction.NewPlugin()
	approve.SetAuthorizer(authz)
	sign.SetAuthorizer(authz)
	attest := ctbattest.NewPlugin()
	attest.SetAuthorizer(authz)
	gates := featuregate.NewFeatureGate()
	if err := gates.Add(map[featuregate.Feature]featuregate.FeatureSpec{features.ClusterTrustBundle: {Default: true, PreRelease: featuregate.Beta}}); err != nil {
		return err
	}
	attest.InspectFeatureGates(gates)
	for _, p := range []admission.InitializationValidator{approve, sign, restrict, attest} {
		if err := p.ValidateInitialization(); err != nil {
			return err
		}
	}
	for _, st := range reg.Stores() {
		switch {
		case st.GVR.Group != registry.CertificatesGroup:
		case st.GVR.Resource == "certificatesigningrequests":
			st.Admit = admissionhook.Hook(registry.Scheme, st.GVR, st.GVK(), nodeSubject, approve, sign, restrict)
		case st.GVR.Resource == "clustertrustbundles":
			st.Admit = admissionhook.Hook(registry.Scheme, st.GVR, st.GVK(), attest)
		}
	}
	return nil
}
