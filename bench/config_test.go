package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.Kubeconfigs = []string{"kc"}
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("the default configuration with a kubeconfig: %v", err)
	}
	paced := valid()
	paced.QPS = 15
	if err := paced.Validate(); err != nil {
		t.Fatalf("a qps with the default burst: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"a kubeconfig is needed", func(c *Config) { c.Kubeconfigs = nil }, "kubeconfig"},
		{"workloads are known names", func(c *Config) { c.Workloads = []string{"get", "gte"} }, `unknown workload "gte"`},
		{"a workload runs once", func(c *Config) { c.Workloads = []string{"create", "get", "create"} }, `workload "create" given twice`},
		{"some workload is selected", func(c *Config) { c.Workloads = nil }, "no workloads"},
		{"clients are at least one", func(c *Config) { c.Clients = 0 }, "clients 0"},
		{"clients are bounded", func(c *Config) { c.Clients = 100000 }, "clients 100000"},
		{"duration is positive", func(c *Config) { c.Duration = 0 }, "duration"},
		{"request timeout is positive", func(c *Config) { c.RequestTimeout = -time.Second }, "timeouts"},
		{"create kind is configmaps or serviceaccounts", func(c *Config) { c.CreateKind = "secrets" }, `create kind "secrets"`},
		{"list size is positive", func(c *Config) { c.ListSize = 0 }, "list size 0"},
		{"list page size is positive", func(c *Config) { c.ListPageSize = 0 }, "page size"},
		{"watchers are at least one", func(c *Config) { c.Watchers = 0 }, "watchers 0"},
		{"watch rate is not negative", func(c *Config) { c.WatchRate = -1 }, "watch rate"},
		{"a qps needs a burst", func(c *Config) { c.QPS, c.Burst = 15, 0 }, "burst 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrConfig mentioning %q", err, tc.want)
			}
		})
	}
}

func TestMixOrder(t *testing.T) {
	order := mixOrder()
	if len(order) != 20 {
		t.Fatalf("%d slots, want 20", len(order))
	}
	count := map[string]int{}
	for _, name := range order {
		count[name]++
	}
	for _, m := range mix {
		if count[m.name] != m.of20 {
			t.Errorf("%s in %d of 20 slots, want %d", m.name, count[m.name], m.of20)
		}
		if m.name != "list-page" && lookup(m.name) == nil {
			t.Errorf("mix names %q, which is no workload", m.name)
		}
	}
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] && order[i] != "get" {
			t.Errorf("slots %d and %d are both %s; only the largest share may repeat", i-1, i, order[i])
		}
	}
}

func TestWorkloadNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range WorkloadNames() {
		if seen[n] {
			t.Fatalf("workload %q twice", n)
		}
		seen[n] = true
		if lookup(n) == nil {
			t.Fatalf("lookup(%q) = nil", n)
		}
	}
}
