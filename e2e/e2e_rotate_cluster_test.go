package e2e_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2ERotateOnCluster rotates trust roots of a running three-node
// cluster online (issue 29):
//
//   - the gossip key, with the operator's new key: every member stays
//     alive through start, promote and finish, the leader never changes,
//     and a follower restarted afterwards, whose gossip.key is still the
//     old one, gossips again with the keyring it had applied;
//   - the signing key: promote is refused while a voter is down, naming
//     it, and taken once it is back.
func TestE2ERotateOnCluster(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	rotate, mustRotate := nodes[0].rotate, func(args ...string) string { t.Helper(); return nodes[0].mustRotate(t, args...) }
	// allAlive checks, for a while, that every node sees every member
	// alive and the same leader.
	allAlive := func(step string) {
		t.Helper()
		for i := 0; i < 10; i++ {
			for _, n := range nodes {
				ms, err := n.members()
				if err != nil {
					t.Fatalf("after %s, members of %s: %v", step, n.name, err)
				}
				if len(ms) != 3 {
					t.Fatalf("after %s, %s sees %d members", step, n.name, len(ms))
				}
				for _, m := range ms {
					if m.Status != "alive" {
						t.Fatalf("after %s, %s sees %s %s", step, n.name, m.Name, m.Status)
					}
				}
			}
			if l := leaderOf(t, nodes); l != leader {
				t.Fatalf("after %s the leader moved from %s to %s", step, leader.name, l.name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The gossip key: the seeded keyring holds gossip.key, active.
	waitFor(t, 30*time.Second, "the gossip keyring seeded", func() bool {
		out, err := rotate("gossip-key", "status")
		return err == nil && strings.Contains(out, "active")
	})
	newKey := filepath.Join(t.TempDir(), "new-gossip.key")
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i * 7)
	}
	if err := os.WriteFile(newKey, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRotate("gossip-key", "start", "--key-file", newKey)
	if !strings.Contains(out, "is pending") || strings.Contains(out, base64.StdEncoding.EncodeToString(key)) {
		t.Fatalf("start:\n%s", out)
	}
	allAlive("start")
	waitFor(t, 30*time.Second, "every voter applied the new key", func() bool {
		_, err := rotate("gossip-key", "promote")
		return err == nil
	})
	allAlive("promote")
	waitFor(t, 30*time.Second, "every voter encrypts with the new key", func() bool {
		_, err := rotate("gossip-key", "finish")
		return err == nil
	})
	allAlive("finish")
	if out := mustRotate("gossip-key", "status"); strings.Count(out, "active") != 1 || strings.Contains(out, "retiring") {
		t.Fatalf("status after finish:\n%s", out)
	}
	follower := followersOf(nodes, leader)[0]
	follower.stop()
	follower.start()
	follower.waitReady(60 * time.Second)
	allAlive("a follower's restart with the old gossip.key")

	// The signing key: promote waits for every voter.
	mustRotate("signing-key", "start")
	down := followersOf(nodes, leader)[1]
	down.kill()
	waitFor(t, 30*time.Second, "promote refused for the dead voter", func() bool {
		out, err := rotate("signing-key", "promote")
		return err != nil && strings.Contains(out, down.name) && strings.Contains(out, "have not applied the pending key yet")
	})
	down.start()
	down.waitReady(60 * time.Second)
	waitFor(t, 30*time.Second, "promote once the voter is back", func() bool {
		_, err := rotate("signing-key", "promote")
		return err == nil
	})
}
