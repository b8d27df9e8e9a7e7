package cluster

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// Findings from running on Kubernetes: StatefulSet pods whose raft
// addresses are stable DNS names, whose gossip address (the pod IP)
// changes on every restart, and whose gossip seeds name every replica,
// the pod itself included.

// A seed that names this node by another spelling (a pod's own DNS name;
// here localhost) makes memberlist "join" itself. That is not joining: the
// node keeps trying until a peer answers, here one that starts later and
// has no seeds of its own, so only this node's retries can bring the two
// together.
func TestJoinIgnoresItselfAmongSeeds(t *testing.T) {
	c := newHACluster(t)
	aGossip, bGossip := freeAddr(t), freeAddr(t)
	_, aPort, _ := net.SplitHostPort(aGossip)
	a := c.add("node-a", haOpts{expect: 2, gossip: true, gossipAt: aGossip, join: []string{"localhost:" + aPort, bGossip}})
	// Let node-a's first join attempts run while node-b is down: the one
	// seed that answers is node-a itself.
	waitFor(t, "node-a's first join attempt", func() bool {
		return a.logs.contains("joined gossip") || a.logs.contains("reached no other node")
	})
	time.Sleep(time.Second)
	b := c.add("node-b", haOpts{expect: 2, gossip: true, gossipAt: bGossip})
	waitFor(t, "node-a and node-b to see each other alive", func() bool {
		return memberStatus(a.node, "node-b") == StatusAlive && memberStatus(b.node, "node-a") == StatusAlive
	})
	waitVoters(t, []string{"node-a", "node-b"}, a, b)
	c.leader().propose(t, testCtx(t), "after-join")
}

// waitLong is waitFor with a longer bound, for conditions that wait out
// memberlist's own timers (suspicion, dead-node reclaim, push/pull).
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gossipAddrOf is the gossip address by which n's memberlist knows name
// ("" if it does not list it alive).
func gossipAddrOf(n *Node, name string) string {
	for _, m := range n.gossip.ml.Members() {
		if m.Name == name {
			return m.Address()
		}
	}
	return ""
}

// A node restarted with its data directory, its name and its raft address
// but at a new gossip address (a pod with a new IP) becomes alive again in
// every member's view, and raft keeps working with it. memberlist refuses a
// known name from a new address ("conflicting address") unless the old
// entry has been dead for DeadNodeReclaimTime; with 0 that never happens,
// and only memberlist forgetting the dead node (GossipToTheDeadTime, 30s
// by default) let the node back in. The test makes that long, so only the
// reclaim time can.
func TestRestartAtNewGossipAddress(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.tuneGossip = func(mc *memberlist.Config) { mc.GossipToTheDeadTime = 10 * time.Minute }
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	x := c.others(l)[0]
	var seeds []string
	for _, n := range c.nodes {
		seeds = append(seeds, n.node.gossipAddr())
	}
	before := l.propose(t, ctx, "before-restart")
	if err := x.node.WaitApplied(ctx, before); err != nil {
		t.Fatal(err)
	}
	_ = x.node.Shutdown() // a crash: no leave message
	for _, n := range c.others(x) {
		waitFor(t, n.name+" to report "+x.name+" failed", func() bool { return memberStatus(n.node, x.name) == StatusFailed })
	}

	newAddr := freeAddr(t)
	back := c.add(x.name, haOpts{expect: 3, gossip: true, gossipAt: newAddr, join: seeds, sameAddr: true, state: x})
	for _, n := range c.others(x, back) {
		waitLong(t, n.name+" to see "+x.name+" alive at "+newAddr, func() bool {
			return memberStatus(n.node, x.name) == StatusAlive && gossipAddrOf(n.node, x.name) == newAddr
		})
	}
	waitVoters(t, names(c.others(x)...), c.others(x)...)
	l = c.leader(c.others(x)...)
	after := l.propose(t, ctx, "after-restart")
	if err := back.node.WaitApplied(ctx, after); err != nil {
		t.Fatalf("the restarted node does not replicate: %v", err)
	}
	if back.node.fsm.AppliedIndex() < before {
		t.Fatal("the restarted node lost its state")
	}
}
