package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/resourceconfig"
	serverstore "k8s.io/apiserver/pkg/server/storage"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/trustplane/trustplane/api/registry"
)

// parseRuntimeConfig reads --runtime-config as kube-apiserver does
// (group/version=true|false, group/version/resource=..., api/all, api/ga,
// api/beta, api/alpha). Stable versions are on by default; alpha and beta
// versions are off unless enabled, as kube-apiserver serves new betas,
// except the deprecated authentication.k8s.io/v1beta1.
func parseRuntimeConfig(s string) (*serverstore.ResourceConfig, error) {
	overrides := cliflag.ConfigurationMap{}
	if strings.TrimSpace(s) != "" {
		if err := overrides.Set(s); err != nil {
			return nil, fmt.Errorf("--runtime-config: %w", err)
		}
	}
	defaults := serverstore.NewResourceConfig()
	// Every known version is listed, so that api/alpha and friends find it.
	var stable, unstable []schema.GroupVersion
	for _, gv := range registry.Scheme.PrioritizedVersionsAllGroups() {
		if strings.Contains(gv.Version, "alpha") || strings.Contains(gv.Version, "beta") {
			unstable = append(unstable, gv)
		} else {
			stable = append(stable, gv)
		}
	}
	defaults.EnableVersions(stable...)
	defaults.DisableVersions(unstable...)
	// authentication.k8s.io/v1beta1 (SelfSubjectReview) stays on by default
	// and answers with kube's deprecation warning, for older kubectl.
	defaults.EnableVersions(schema.GroupVersion{Group: "authentication.k8s.io", Version: "v1beta1"})
	rc, err := resourceconfig.MergeAPIResourceConfigs(defaults, overrides, registry.Scheme)
	if err != nil {
		return nil, fmt.Errorf("--runtime-config: %w", err)
	}
	return rc, nil
}

// certificateResources returns the certificates.k8s.io resources the
// runtime configuration serves: ClusterTrustBundles only in the versions it
// enables (both are off by default).
func certificateResources(rc *serverstore.ResourceConfig) []*registry.Resource {
	var bundles []string
	for _, v := range []string{"v1beta1", "v1alpha1"} {
		if rc.ResourceEnabled(schema.GroupVersionResource{Group: registry.CertificatesGroup, Version: v, Resource: "clustertrustbundles"}) {
			bundles = append(bundles, v)
		}
	}
	return registry.CertificateResources(bundles...)
}
