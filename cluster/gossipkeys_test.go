package cluster

import (
	"crypto/rand"
	"testing"
	"time"
)

// TestGossipKeyRotationLive rotates the gossip key of a running cluster
// through the rotation's phases with SetGossipKeys: every node trusts the
// new key, then every node encrypts with it, then the old key goes. No
// member is ever seen anything but alive, and afterwards a node with only
// the old key cannot join while one with the new key can.
func TestGossipKeyRotationLive(t *testing.T) {
	c := newHACluster(t)
	c.startGossipCluster(3, nil)
	nodes := c.running()
	names := []string{"node-0", "node-1", "node-2"}
	allAlive := func() bool {
		for _, n := range nodes {
			for _, name := range names {
				if memberStatus(n.node, name) != StatusAlive {
					return false
				}
			}
		}
		return true
	}
	waitFor(t, "every member alive", allAlive)
	// staysAlive watches membership for a while after a step: a node that
	// cannot decrypt a peer's probes would have it suspected, then failed.
	staysAlive := func(step string) {
		t.Helper()
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if !allAlive() {
				t.Fatalf("a member flapped after %s", step)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	old := c.key
	next := make([]byte, 32)
	if _, err := rand.Read(next); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name    string
		primary []byte
		trusted [][]byte
	}{
		{"start: every node trusts the new key", old, [][]byte{old, next}},
		{"promote: every node encrypts with it", next, [][]byte{old, next}},
		{"finish: the old key goes", next, [][]byte{next}},
	} {
		for _, n := range nodes {
			if err := n.node.SetGossipKeys(step.primary, step.trusted); err != nil {
				t.Fatalf("%s on %s: %v", step.name, n.name, err)
			}
		}
		staysAlive(step.name)
	}
	for _, n := range nodes {
		if keys := n.node.gossip.keyring.GetKeys(); len(keys) != 1 || string(keys[0]) != string(next) {
			t.Fatalf("%s's keyring after finish holds %d keys", n.name, len(keys))
		}
	}

	stale := c.add("node-3", haOpts{gossip: true, join: []string{c.seed()}, mutate: func(cfg *Config) { cfg.GossipKey = old }})
	fresh := c.add("node-4", haOpts{gossip: true, join: []string{c.seed()}, mutate: func(cfg *Config) { cfg.GossipKey = next }})
	waitFor(t, "the node with the new key to join", func() bool { return memberStatus(nodes[0].node, fresh.name) == StatusAlive })
	if s := memberStatus(nodes[0].node, stale.name); s == StatusAlive {
		t.Fatal("a node with only the retired key joined gossip")
	}
}
