package e2e_test

import (
	"fmt"
	"testing"
	"time"
)

// stateOf is n's raft state as n itself reports it ("" when it does not
// answer).
func stateOf(n *node) string {
	ms, err := n.members()
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Name == n.name {
			return m.RaftState
		}
	}
	return ""
}

// gossipStatus is the gossip status of member name as n reports it.
func gossipStatus(n *node, name string) string {
	ms, err := n.members()
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Name == name {
			return m.Status
		}
	}
	return ""
}

// TestPartitionedLeaderIsReplaced: three real nodes behind fault proxies.
// The leader is cut off from both others (each side drops the other's IP
// on its raft, gossip and API proxies). The other two elect a leader and
// take writes, directly and forwarded by the third node's API; the cut-off
// one commits nothing. After the heal the old leader follows and reads the
// writes it missed, at the same resourceVersion, and gossip, which marked
// it failed, sees it alive again.
func TestPartitionedLeaderIsReplaced(t *testing.T) {
	cluster := startProxiedCluster(t, 3, "--controllers=false", "--write-leader-wait", "2s")
	byNode := map[*node]*proxiedNode{}
	var plain []*node
	for _, p := range cluster {
		byNode[p.node] = p
		plain = append(plain, p.node)
	}
	old := byNode[leaderOf(t, plain)]
	var rest []*proxiedNode
	for _, p := range cluster {
		if p != old {
			rest = append(rest, p)
		}
	}
	if _, err := createSA(old.clientset(), "before"); err != nil {
		t.Fatal(err)
	}
	// Gossip's UDP goes through the relays too (the cluster formed through
	// the gossip proxies, so TCP does).
	waitFor(t, 20*time.Second, "gossip packets through every UDP relay", func() bool {
		for _, p := range cluster {
			if p.proxy.GossipUDP.Stats().PacketsIn == 0 {
				return false
			}
		}
		return true
	})

	heal := isolate(cluster, old)
	defer heal()

	var leader, other *proxiedNode
	waitFor(t, 30*time.Second, "a new leader among the two connected nodes", func() bool {
		for i, r := range rest {
			if stateOf(r.node) == "Leader" {
				leader, other = r, rest[1-i]
				return true
			}
		}
		return false
	})
	t.Logf("%s (%s) was cut off; %s (%s) leads", old.name, old.ip, leader.name, leader.ip)

	during, err := createSA(leader.clientset(), "during")
	for i := 0; err != nil && i < 20; i++ { // the new leader may still be finishing its term barrier
		time.Sleep(250 * time.Millisecond)
		during, err = createSA(leader.clientset(), "during")
	}
	if err != nil {
		t.Fatalf("a write on the new leader failed: %v", err)
	}
	// The follower on the majority side forwards through the leader's API proxy.
	forwarded, err := createSA(other.clientset(), "forwarded")
	if err != nil {
		t.Fatalf("a write forwarded by %s to the new leader failed: %v", other.name, err)
	}
	if _, err := createSA(old.clientset(), "lost"); err == nil {
		t.Fatalf("the cut-off node %s committed a write without a quorum", old.name)
	}
	waitFor(t, 20*time.Second, "the cut-off leader to step down", func() bool {
		s := stateOf(old.node)
		return s != "" && s != "Leader"
	})
	if s := old.proxy.Raft.Stats(); s.Held+s.HeldIn+s.HeldOut == 0 {
		t.Fatalf("the cut-off node's raft proxy held nothing back: %+v", s)
	}
	waitFor(t, 20*time.Second, "gossip on the majority side to stop hearing "+old.name, func() bool {
		return old.proxy.GossipUDP.Stats().DroppedIn > 0 && gossipStatus(leader.node, old.name) != "alive"
	})

	heal()
	waitFor(t, 40*time.Second, fmt.Sprintf("%s to follow again and every node to see one leader", old.name), func() bool {
		leaders := 0
		for _, p := range cluster {
			switch stateOf(p.node) {
			case "Leader":
				leaders++
			case "Follower":
			default:
				return false
			}
		}
		return leaders == 1 && stateOf(old.node) == "Follower"
	})
	for _, want := range []struct{ name, rv string }{{"during", during.ResourceVersion}, {"forwarded", forwarded.ResourceVersion}} {
		var got string
		waitFor(t, 20*time.Second, old.name+" to read "+want.name, func() bool {
			sa, err := getSA(old.clientset(), want.name, "")
			if err != nil {
				return false
			}
			got = sa.ResourceVersion
			return true
		})
		if got != want.rv {
			t.Fatalf("%s reads %s at resourceVersion %s, the leader wrote it at %s", old.name, want.name, got, want.rv)
		}
	}
	waitFor(t, 45*time.Second, "gossip to see every node alive again on every node", func() bool {
		for _, p := range cluster {
			for _, q := range cluster {
				if gossipStatus(p.node, q.name) != "alive" {
					return false
				}
			}
		}
		return true
	})
	if _, err := getSA(old.clientset(), "lost", ""); err == nil {
		t.Fatalf("the write the cut-off node could not commit exists after the heal")
	}
}
