package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
)

// testAPIs are the resources the node serves whose defaults differ: stable
// ones, the bundles (a new beta and an alpha), and v1beta1
// SelfSubjectReview, whose removal release is the server's.
var testAPIs = []servedAPI{
	{gvr("certificates.k8s.io", "v1", "certificatesigningrequests"), gvk("certificates.k8s.io", "v1", "CertificateSigningRequest")},
	{gvr("certificates.k8s.io", "v1beta1", "clustertrustbundles"), gvk("certificates.k8s.io", "v1beta1", "ClusterTrustBundle")},
	{gvr("certificates.k8s.io", "v1alpha1", "clustertrustbundles"), gvk("certificates.k8s.io", "v1alpha1", "ClusterTrustBundle")},
	{gvr("authentication.k8s.io", "v1", "selfsubjectreviews"), gvk("authentication.k8s.io", "v1", "SelfSubjectReview")},
	{gvr("authentication.k8s.io", "v1beta1", "selfsubjectreviews"), gvk("authentication.k8s.io", "v1beta1", "SelfSubjectReview")},
	{gvr("rbac.authorization.k8s.io", "v1", "roles"), gvk("rbac.authorization.k8s.io", "v1", "Role")},
	{gvr("", "v1", "secrets"), gvk("", "v1", "Secret")},
}

func gvr(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

func gvk(g, v, k string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g, Version: v, Kind: k}
}

func TestRuntimeConfig(t *testing.T) {
	// What each flag leaves served, in testAPIs' order.
	cases := []struct {
		flag    string
		want    []bool
		release string // emulated; 1.33 if empty
	}{
		{"", []bool{true, false, false, true, false, true, true}, ""},
		{"certificates.k8s.io/v1alpha1=true", []bool{true, false, true, true, false, true, true}, ""},
		{"certificates.k8s.io/v1alpha1", []bool{true, false, true, true, false, true, true}, ""},
		{"certificates.k8s.io/v1beta1=true,certificates.k8s.io/v1alpha1=false", []bool{true, true, false, true, false, true, true}, ""},
		{"certificates.k8s.io/v1beta1/clustertrustbundles=true", []bool{true, true, false, true, false, true, true}, ""},
		{"api/alpha=true", []bool{true, false, true, true, false, true, true}, ""},
		// A removed version comes back only when the flag names it.
		{"authentication.k8s.io/v1beta1=true", []bool{true, false, false, true, true, true, true}, ""},
		{"authentication.k8s.io/v1beta1/selfsubjectreviews=true", []bool{true, false, false, true, true, true, true}, ""},
		{"api/beta=true", []bool{true, true, false, true, true, true, true}, ""},
		{"api/all=false,certificates.k8s.io/v1=false", []bool{false, false, false, false, false, false, false}, ""},
		{"v1/secrets=false", []bool{true, false, false, true, false, true, false}, ""},
		{"api/all=false,v1=true", []bool{false, false, false, false, false, false, true}, ""},
		{"api/ga=false,rbac.authorization.k8s.io/v1=true", []bool{false, false, false, false, false, true, false}, ""},
		{"rbac.authorization.k8s.io/v1=false", []bool{true, false, false, true, false, false, true}, ""},
		{"rbac.authorization.k8s.io/v1/roles=false", []bool{true, false, false, true, false, false, true}, ""},
		{"api/v1=false", []bool{true, false, false, true, false, true, false}, ""},
		// Emulating 1.32: v1beta1 ClusterTrustBundle (1.33) is not served even
		// when named; v1alpha1 (1.26) still can be.
		{"certificates.k8s.io/v1beta1=true,certificates.k8s.io/v1alpha1=true", []bool{true, false, true, true, false, true, true}, "1.32"},
		{"api/all=true", []bool{true, false, true, true, true, true, true}, "1.32"},
	}
	for _, c := range cases {
		release := version.MajorMinor(1, 33)
		if c.release != "" {
			release = version.MustParseGeneric(c.release)
		}
		rc, err := parseRuntimeConfig(c.flag, testAPIs, release)
		if err != nil {
			t.Errorf("%q: %v", c.flag, err)
			continue
		}
		for i, a := range testAPIs {
			if got := rc.ResourceEnabled(a.gvr); got != c.want[i] {
				t.Errorf("%q: %v served = %v, want %v", c.flag, a.gvr, got, c.want[i])
			}
		}
	}
	for _, bad := range []string{"certificates.k8s.io/v1alpha1=maybe", "certificates.k8s.io/v9=true", "nosuch.example.com/v1=true", "api/all=sometimes", "api/all=false", "rbac.authorization.k8s.io/v1/Roles=false"} {
		if _, err := parseRuntimeConfig(bad, testAPIs, version.MajorMinor(1, 33)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestVersionDefaults checks the specification's lifetime rules against
// kube's lifecycle data, at the server's release and at others.
func TestVersionDefaults(t *testing.T) {
	cases := []struct {
		kind    schema.GroupVersionKind
		release string
		want    bool
	}{
		{gvk("", "v1", "Secret"), "1.33", true},
		{gvk("certificates.k8s.io", "v1alpha1", "ClusterTrustBundle"), "1.33", false},
		// A beta from 1.22 on is off by default.
		{gvk("certificates.k8s.io", "v1beta1", "ClusterTrustBundle"), "1.33", false},
		// A beta introduced before 1.22 was on while it was served (1.6 to
		// 1.21), and is off from its removal release (1.22).
		{gvk("rbac.authorization.k8s.io", "v1beta1", "ClusterRole"), "1.21", true},
		{gvk("rbac.authorization.k8s.io", "v1beta1", "ClusterRole"), "1.22", false},
		{gvk("certificates.k8s.io", "v1beta1", "CertificateSigningRequest"), "1.21", true},
		{gvk("certificates.k8s.io", "v1beta1", "CertificateSigningRequest"), "1.33", false},
		// v1beta1 SelfSubjectReview: introduced 1.27, removed 1.33.
		{gvk("authentication.k8s.io", "v1beta1", "SelfSubjectReview"), "1.32", false},
		{gvk("authentication.k8s.io", "v1beta1", "SelfSubjectReview"), "1.33", false},
		// A version is off before the release that introduced it (1.6 here).
		{gvk("rbac.authorization.k8s.io", "v1beta1", "ClusterRole"), "1.5", false},
	}
	for _, c := range cases {
		if got := defaultOn(c.kind, version.MustParseGeneric(c.release)); got != c.want {
			t.Errorf("%v at %s: on by default = %v, want %v", c.kind, c.release, got, c.want)
		}
	}
}
