package main

import (
	"strings"
	"testing"

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
