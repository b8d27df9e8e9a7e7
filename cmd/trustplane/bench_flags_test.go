package main

import (
	"slices"
	"testing"
	"time"
)

func TestBenchFlags(t *testing.T) {
	t.Setenv("TRUSTPLANE_BENCH_CLIENTS", "7")
	t.Setenv("TRUSTPLANE_BENCH_KUBECONFIG", "a.kc,b.kc")
	t.Setenv("TRUSTPLANE_BENCH_DURATION", "1m")
	// serve's twins are the node's settings, not the bench's.
	t.Setenv("TRUSTPLANE_WATCHERS", "3")
	cfg, out, err := benchFlags([]string{"--duration", "3s", "--workloads", "get, csr", "--protobuf", "--out", "r.json", "--qps", "50"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"a TRUSTPLANE_BENCH_ variable fills a flag not given", cfg.Clients == 7},
		{"the kubeconfig variable is a comma-separated list", slices.Equal(cfg.Kubeconfigs, []string{"a.kc", "b.kc"})},
		{"the command line wins over the environment", cfg.Duration == 3*time.Second},
		{"workloads are a comma-separated list", slices.Equal(cfg.Workloads, []string{"get", "csr"})},
		{"serve's TRUSTPLANE_ variables are ignored", cfg.Watchers == 50},
		{"flags reach the configuration", cfg.Protobuf && cfg.QPS == 50 && out == "r.json"},
		{"the result records the flags", cfg.Flags["clients"] == "7" && cfg.Flags["kubeconfig"] == "a.kc,b.kc"},
	} {
		if !c.ok {
			t.Errorf("%s: %+v", c.what, cfg)
		}
	}
}

func TestBenchFlagsRefuse(t *testing.T) {
	for _, args := range [][]string{
		{"--kubeconfig", "kc", "--create-kind", "pods"},
		{"--kubeconfig", "kc", "--list-size", "-1"},
		{"--kubeconfig", "kc", "extra"},
	} {
		if _, _, err := benchFlags(args); err == nil {
			t.Errorf("benchFlags(%q) accepted", args)
		}
	}
}
