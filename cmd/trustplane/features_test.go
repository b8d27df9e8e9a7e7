package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// TestFeatureGates: --feature-gates takes kube's gates with kube's checks,
// and checking a flag leaves the process-wide gate alone.
func TestFeatureGates(t *testing.T) {
	cases := []struct {
		flag, err string
	}{
		{flag: ""},
		{flag: "WatchList=false,APIResponseCompression=false"},
		{flag: "ClusterTrustBundle=true,AuthorizeWithSelectors=false"},
		// Any kube gate is accepted, as kube-apiserver accepts the kubelet's.
		{flag: "InPlacePodVerticalScaling=true"},
		{flag: "NoSuchGate=true", err: "unrecognized feature gate: NoSuchGate"},
		{flag: "WatchList", err: "missing bool value for WatchList"},
		{flag: "WatchList=maybe", err: "invalid value of WatchList=maybe"},
		{flag: "StrictCostEnforcementForVAP=false", err: "cannot set feature gate StrictCostEnforcementForVAP to false, feature is locked to true"},
	}
	before := map[string]bool{}
	for _, g := range honouredGates {
		before[string(g)] = utilfeature.DefaultFeatureGate.Enabled(g)
	}
	for _, c := range cases {
		err := checkFeatureGates(c.flag)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.flag, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want %q", c.flag, err, c.err)
		}
	}
	for _, g := range honouredGates {
		if utilfeature.DefaultFeatureGate.Enabled(g) != before[string(g)] {
			t.Errorf("checking --feature-gates changed the process-wide gate %s", g)
		}
		if err := checkFeatureGates(string(g) + "=true"); err != nil {
			t.Errorf("honoured gate %s: %v", g, err)
		}
	}
}

// TestGatesFor: a ClusterTrustBundle version enabled by --runtime-config
// turns its gate on, unless --feature-gates names the gate.
func TestGatesFor(t *testing.T) {
	cases := []struct{ gates, runtime, want string }{
		{"", "", ""},
		{"", "certificates.k8s.io/v1beta1=true", "ClusterTrustBundle=true"},
		{"", "certificates.k8s.io/v1alpha1=true", "ClusterTrustBundle=true"},
		{"", "api/beta=true", "ClusterTrustBundle=true"},
		{"", "certificates.k8s.io/v1beta1/clustertrustbundles=true", "ClusterTrustBundle=true"},
		{"WatchList=false", "certificates.k8s.io/v1beta1=true", "WatchList=false,ClusterTrustBundle=true"},
		{"ClusterTrustBundle=false", "certificates.k8s.io/v1beta1=true", "ClusterTrustBundle=false"},
		{" ClusterTrustBundle = true", "certificates.k8s.io/v1beta1=true", " ClusterTrustBundle = true"},
		{"", "certificates.k8s.io/v1beta1=false", ""},
		{"", "rbac.authorization.k8s.io/v1=true", ""},
	}
	for _, c := range cases {
		if got := gatesFor(c.gates, c.runtime, version.MustParse("1.33")); got != c.want {
			t.Errorf("gatesFor(%q, %q) = %q, want %q", c.gates, c.runtime, got, c.want)
		}
	}
}

// TestConformanceSelectsDefaultGates: make conformance runs the upstream
// specs of every gate this server turns on where kube 1.33 has it off
// (defaultGates), since its users get that behaviour: the script's list is
// this one.
func TestConformanceSelectsDefaultGates(t *testing.T) {
	script, err := os.ReadFile("../../scripts/conformance.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^DEFAULT_ON_GATES="([^"]*)"`).FindSubmatch(script)
	if m == nil {
		t.Fatal(`scripts/conformance.sh has no DEFAULT_ON_GATES="..." line`)
	}
	got := strings.Fields(string(m[1]))
	var want []string
	for g, on := range defaultGates {
		if on {
			want = append(want, g)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("scripts/conformance.sh selects the specs of gates %v; the gates on by default here are %v", got, want)
	}
}
