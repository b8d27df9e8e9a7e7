package controllers

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// standing is a Stand the test switches.
type standing struct{ v atomic.Bool }

func (s *standing) StandsForControllers() bool { return s.v.Load() }

// testHosts runs one Host per name against one fake API, each with a Stand
// the test switches (all standing at first).
func testHosts(t *testing.T, names ...string) (map[string]*Host, map[string]*standing, kubernetes.Interface) {
	t.Helper()
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	hosts, stands := map[string]*Host{}, map[string]*standing{}
	for _, name := range names {
		st := &standing{}
		st.v.Store(true)
		cfg := DefaultHostConfig()
		cfg.Stand = st
		cfg.Identity = name
		cfg.Client = func() (kubernetes.Interface, func(), error) { return cs, func() {}, nil }
		// A lease that never runs out within the test: every handover
		// is a release.
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod, cfg.PollInterval = time.Hour, 30*time.Minute, 50*time.Millisecond, 10*time.Millisecond
		h, err := NewHost(cfg)
		if err != nil {
			t.Fatal(err)
		}
		hosts[name], stands[name] = h, st
		wg.Add(1)
		go func() { defer wg.Done(); h.Run(ctx) }()
	}
	return hosts, stands, cs
}

// holders names the hosts that hold the lease now.
func holders(hosts map[string]*Host) []string {
	var out []string
	for name, h := range hosts {
		if h.IsLeader() {
			out = append(out, name)
		}
	}
	return out
}

// TestHost: of the nodes that stand, one holds the controllers' lease; a
// holder that stops standing releases it, so another takes it without
// waiting for it to run out; a node that does not stand never takes it.
func TestHost(t *testing.T) {
	hosts, stands, cs := testHosts(t, "n1", "n2", "n3")
	var first string
	eventually(t, "one holder", func() bool {
		h := holders(hosts)
		if len(h) == 1 {
			first = h[0]
		}
		return len(h) == 1
	})
	lease, err := cs.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != first {
		t.Fatalf("the lease: %v %v, want held by %s", lease, err, first)
	}

	// The holder stops standing (it became raft's leader): another takes
	// the lease, which has an hour left, so only because it was released.
	stands[first].v.Store(false)
	var second string
	eventually(t, "a second holder", func() bool {
		h := holders(hosts)
		if len(h) == 1 && h[0] != first {
			second = h[0]
		}
		return second != ""
	})

	// Nobody else stands: the holder keeps it, the first never takes it
	// back while it does not stand.
	for name, st := range stands {
		if name != second {
			st.v.Store(false)
		}
	}
	time.Sleep(20 * hosts[first].cfg.RetryPeriod)
	if h := holders(hosts); len(h) != 1 || h[0] != second {
		t.Fatalf("holders %v, want only %s", h, second)
	}

	// Nobody stands: nobody holds it.
	stands[second].v.Store(false)
	eventually(t, "no holder", func() bool { return len(holders(hosts)) == 0 })
	lease, err = cs.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil || (lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "") {
		t.Fatalf("the lease after every node stopped standing: %v %v, want released", lease, err)
	}
}

func TestNewHostRefusesBadTimings(t *testing.T) {
	good := func() *HostConfig {
		c := DefaultHostConfig()
		c.Stand, c.Identity = &standing{}, "n1"
		c.Client = func() (kubernetes.Interface, func(), error) { return fake.NewClientset(), func() {}, nil }
		return c
	}
	for name, mutate := range map[string]func(*HostConfig){
		"no identity":               func(c *HostConfig) { c.Identity = "" },
		"no stand":                  func(c *HostConfig) { c.Stand = nil },
		"renew deadline over lease": func(c *HostConfig) { c.RenewDeadline = c.LeaseDuration },
		"retry over renew deadline": func(c *HostConfig) { c.RetryPeriod = c.RenewDeadline },
		"no poll interval":          func(c *HostConfig) { c.PollInterval = 0 },
	} {
		c := good()
		mutate(c)
		if _, err := NewHost(c); err == nil {
			t.Errorf("%s: NewHost accepted it", name)
		}
	}
	if _, err := NewHost(good()); err != nil {
		t.Fatal(err)
	}
}
