package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/version"
	serveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/server/resourceconfig"
	serverstore "k8s.io/apiserver/pkg/server/storage"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	kubefeatures "k8s.io/kubernetes/pkg/features"

	"github.com/trustplane/trustplane/api/registry"
)

// servedAPI is one resource the server can serve: its GVR (a subresource's
// parent) and the kind it takes, whose lifecycle decides its default.
type servedAPI struct {
	gvr  schema.GroupVersionResource
	kind schema.GroupVersionKind
}

// servedAPIs lists every resource and virtual resource of reg.
func servedAPIs(reg *registry.Registry) []servedAPI {
	var out []servedAPI
	for _, s := range reg.Stores() {
		out = append(out, servedAPI{s.GVR, s.GVK()})
	}
	for _, v := range reg.Virtuals() {
		out = append(out, servedAPI{v.GVR, v.Kind()})
	}
	return out
}

// betaOnByDefaultBefore is the release from which new beta versions are off
// by default (the specification's stability table; kube's KEP-3136).
var betaOnByDefaultBefore = version.MajorMinor(1, 22)

// parseRuntimeConfig reads --runtime-config as kube-apiserver does
// (group/version=true|false, group/version/resource=..., api/all, api/ga,
// api/beta, api/alpha; a missing value is true) over the defaults the
// specification's versioning rules give each of apis:
//
//   - a stable version is on;
//   - an alpha version is off;
//   - a beta version is on only if its kind was introduced before 1.22;
//   - a version whose kind's removal release is the server's or older is off
//     (kube's APILifecycleRemoved), unless the flag turns it on;
//   - a version introduced after the server's release is off, even if the
//     flag turns it on.
//
// The server's release, current, is the one it emulates (emulation.go).
//
// apis may be nil (checking the flag's syntax before the server is built).
func parseRuntimeConfig(s string, apis []servedAPI, current *version.Version) (*serverstore.ResourceConfig, error) {
	overrides := cliflag.ConfigurationMap{}
	if strings.TrimSpace(s) != "" {
		if err := overrides.Set(s); err != nil {
			return nil, fmt.Errorf("--runtime-config: %w", err)
		}
	}
	// The core group's keys, as kube-apiserver spells them (its options'
	// Complete): v1 and api/v1 are the version /v1. kube drops a resource
	// named after them; here it is kept (v1/secrets=false).
	for key, value := range overrides {
		for _, prefix := range []string{"api/v1", "v1"} {
			if rest, ok := strings.CutPrefix(key, prefix); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
				delete(overrides, key)
				overrides["/v1"+rest] = value
				break
			}
		}
		if key == "api/legacy" {
			delete(overrides, key)
		}
	}
	if errs := (&serveroptions.APIEnablementOptions{RuntimeConfig: overrides}).Validate(registry.Scheme); len(errs) > 0 {
		return nil, fmt.Errorf("--runtime-config: %w", utilerrors.NewAggregate(errs))
	}
	defaults := serverstore.NewResourceConfig()
	// Every known version is listed, so that api/alpha and friends find it.
	for _, gv := range registry.Scheme.PrioritizedVersionsAllGroups() {
		if stability(gv.Version) == "ga" {
			defaults.EnableVersions(gv)
		} else {
			defaults.DisableVersions(gv)
		}
	}
	for _, a := range apis {
		on := defaultOn(a.kind, current)
		if on != defaults.ResourceEnabled(a.gvr) {
			if on {
				defaults.EnableResources(a.gvr)
			} else {
				defaults.DisableResources(a.gvr)
			}
		}
	}
	rc, err := resourceconfig.MergeAPIResourceConfigs(defaults, overrides, registry.Scheme)
	if err != nil {
		return nil, fmt.Errorf("--runtime-config: %w", err)
	}
	// A version the emulated release did not have stays off whatever the
	// flag says, as in kube-apiserver (without --emulation-forward-compatible,
	// which is not served here).
	for _, a := range apis {
		if obj, err := registry.Scheme.New(a.kind); err == nil {
			if v, ok := introduced(obj); ok && v.GreaterThan(current) {
				rc.DisableResources(a.gvr)
			}
		}
	}
	return rc, nil
}

// stability is ga, beta or alpha, by the version's name.
func stability(v string) string {
	switch {
	case strings.Contains(v, "alpha"):
		return "alpha"
	case strings.Contains(v, "beta"):
		return "beta"
	}
	return "ga"
}

// defaultOn applies the versioning rules to kind (see parseRuntimeConfig)
// for a server of release current.
func defaultOn(kind schema.GroupVersionKind, current *version.Version) bool {
	obj, err := registry.Scheme.New(kind)
	if err != nil {
		return stability(kind.Version) == "ga"
	}
	if r, ok := obj.(interface{ APILifecycleRemoved() (int, int) }); ok {
		major, minor := r.APILifecycleRemoved()
		if !version.MajorMinor(uint(major), uint(minor)).GreaterThan(current) {
			return false
		}
	}
	v, hasIntroduced := introduced(obj)
	if hasIntroduced && v.GreaterThan(current) {
		return false // newer than the server's release
	}
	switch stability(kind.Version) {
	case "ga":
		return true
	case "beta":
		return hasIntroduced && v.LessThan(betaOnByDefaultBefore)
	}
	return false
}

// apiSelection decides what the node serves: --runtime-config, and the
// feature gates of kinds that need one (ClusterTrustBundle, as in kube).
type apiSelection struct {
	rc    *serverstore.ResourceConfig
	gates featuregate.FeatureGate
}

// serves is registry.Registry.Serving's predicate.
func (a apiSelection) serves(gvr schema.GroupVersionResource, _ schema.GroupVersionKind) bool {
	if !a.rc.ResourceEnabled(gvr) {
		return false
	}
	if gvr.Group == registry.CertificatesGroup && gvr.Resource == "clustertrustbundles" {
		return a.gates.Enabled(kubefeatures.ClusterTrustBundle)
	}
	return true
}

// introduced is the release that introduced obj's version (kube's
// APILifecycleIntroduced; stable versions carry none).
func introduced(obj runtime.Object) (*version.Version, bool) {
	i, ok := obj.(interface{ APILifecycleIntroduced() (int, int) })
	if !ok {
		return nil, false
	}
	major, minor := i.APILifecycleIntroduced()
	return version.MajorMinor(uint(major), uint(minor)), true
}
