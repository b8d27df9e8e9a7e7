package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRuntimeConfig(t *testing.T) {
	ctb := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "certificates.k8s.io", Version: v, Resource: "clustertrustbundles"}
	}
	csr := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "certificatesigningrequests"}
	ssr := schema.GroupVersionResource{Group: "authentication.k8s.io", Version: "v1beta1", Resource: "selfsubjectreviews"}
	if rc, _ := parseRuntimeConfig(""); !rc.ResourceEnabled(ssr) {
		t.Error("v1beta1 SelfSubjectReview is off by default")
	}
	if rc, _ := parseRuntimeConfig("authentication.k8s.io/v1beta1=false"); rc.ResourceEnabled(ssr) {
		t.Error("authentication.k8s.io/v1beta1=false leaves v1beta1 SelfSubjectReview on")
	}
	cases := []struct {
		flag         string
		alpha, beta  bool
		csrs, broken bool
	}{
		{flag: "", csrs: true},
		{flag: "certificates.k8s.io/v1alpha1=true", alpha: true, csrs: true},
		{flag: "certificates.k8s.io/v1alpha1", alpha: true, csrs: true},
		{flag: "certificates.k8s.io/v1beta1=true,certificates.k8s.io/v1alpha1=false", beta: true, csrs: true},
		{flag: "api/alpha=true", alpha: true, csrs: true},
		{flag: "api/all=false", csrs: false},
		{flag: "certificates.k8s.io/v1alpha1=maybe", broken: true},
		{flag: "certificates.k8s.io/v9=true", broken: true},
	}
	for _, c := range cases {
		rc, err := parseRuntimeConfig(c.flag)
		if c.broken {
			if err == nil {
				t.Errorf("%q: no error", c.flag)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.flag, err)
			continue
		}
		if got := rc.ResourceEnabled(ctb("v1alpha1")); got != c.alpha {
			t.Errorf("%q: v1alpha1 bundles enabled = %v, want %v", c.flag, got, c.alpha)
		}
		if got := rc.ResourceEnabled(ctb("v1beta1")); got != c.beta {
			t.Errorf("%q: v1beta1 bundles enabled = %v, want %v", c.flag, got, c.beta)
		}
		if got := rc.ResourceEnabled(csr); got != c.csrs {
			t.Errorf("%q: v1 CSRs enabled = %v, want %v", c.flag, got, c.csrs)
		}
	}
}
