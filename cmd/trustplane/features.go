package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"

	genericfeatures "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/component-base/metrics/prometheus/feature" // registers kubernetes_feature_enabled
	kubefeatures "k8s.io/kubernetes/pkg/features"

	"github.com/trustplane/trustplane/api/registry"
)

// The gates this server honours, among all of kube-apiserver's: every kube
// gate is accepted by --feature-gates, with kube's defaults, locks and
// deprecation warnings, since the flag is kube's (component-base), but only
// these change what trustplane does. kube's own code run here (the review
// REST objects, list option validation, the attest admission plugin) reads
// the same process-wide gate, so it follows them too.
var honouredGates = []featuregate.Feature{
	genericfeatures.APIResponseCompression, // gzip of large responses (api/gzip.go)
	genericfeatures.WatchList,              // sendInitialEvents=true watches
	genericfeatures.AuthorizeWithSelectors, // field and label selectors in SubjectAccessReviews
	kubefeatures.ClusterTrustBundle,        // ClusterTrustBundles are served at all
	// --authentication-config at all, and its anonymous section
	// (api/authnconfig, read by kube's validation).
	genericfeatures.StructuredAuthenticationConfiguration,
	genericfeatures.AnonymousAuthConfigurableEndpoints,
	// MutatingAdmissionPolicies are enforced (kube's plugin reads it); the
	// kinds are served by --runtime-config alone, as in kube.
	genericfeatures.MutatingAdmissionPolicy,
}

// kubefeatures' init registers kube's gates into the process-wide gate that
// k8s.io/apiserver's code reads; the import above makes that explicit.
var _ = kubefeatures.ClusterTrustBundle

// checkFeatureGates checks --feature-gates (Name=bool,...) against kube's
// gates, with kube's parsing and messages, on a copy of the process-wide
// gate, so that a bad flag is refused before anything starts and parsing
// twice (tests) changes nothing.
func checkFeatureGates(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	if err := utilfeature.DefaultMutableFeatureGate.DeepCopy().Set(s); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	return nil
}

// defaultGates are the gates whose default here differs from kube 1.33's
// (docs/COMPATIBILITY.md): kube turned WatchList back off in 1.33 for its
// streaming encoders; here streaming lists are served from the watch cache,
// as they were in every release of this server, and stay on.
var defaultGates = map[string]bool{string(genericfeatures.WatchList): true}

// applyFeatureGates sets the process-wide gate from --feature-gates, once,
// before any part of the server reads it.
func applyFeatureGates(s string) error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(defaultGates); err != nil {
		return err
	}
	if strings.TrimSpace(s) != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(s); err != nil {
			return fmt.Errorf("--feature-gates: %w", err)
		}
	}
	// kubernetes_feature_enabled{name,stage} on /metrics, as kube-apiserver
	// reports every gate.
	utilfeature.DefaultMutableFeatureGate.AddMetrics()
	return nil
}

// clusterTrustBundleVersions are the versions ClusterTrustBundles are
// served in.
var clusterTrustBundleVersions = []schema.GroupVersionResource{
	{Group: registry.CertificatesGroup, Version: "v1beta1", Resource: "clustertrustbundles"},
	{Group: registry.CertificatesGroup, Version: "v1alpha1", Resource: "clustertrustbundles"},
}

// gatesFor is the --feature-gates value the node applies: the flag, and
// ClusterTrustBundle=true when --runtime-config enables a
// ClusterTrustBundle version and the flag does not name that gate. The
// specification serves a group version that --runtime-config enables; kube
// 1.33 also wants the gate, which kube's own code here reads (the attest
// admission plugin, the publisher), so it is turned on with the version
// rather than bypassed. An explicit ClusterTrustBundle=false still turns
// the kind off (docs/COMPATIBILITY.md).
func gatesFor(featureGates, runtimeConfig string, emulated *version.Version) string {
	for _, kv := range strings.Split(featureGates, ",") {
		if name, _, _ := strings.Cut(kv, "="); strings.TrimSpace(name) == string(kubefeatures.ClusterTrustBundle) {
			return featureGates
		}
	}
	rc, err := parseRuntimeConfig(runtimeConfig, nil, emulated)
	if err != nil {
		return featureGates
	}
	for _, gvr := range clusterTrustBundleVersions {
		if rc.ResourceEnabled(gvr) {
			if strings.TrimSpace(featureGates) == "" {
				return string(kubefeatures.ClusterTrustBundle) + "=true"
			}
			return featureGates + "," + string(kubefeatures.ClusterTrustBundle) + "=true"
		}
	}
	return featureGates
}
