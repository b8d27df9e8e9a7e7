package cluster

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
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
		return a.logs.Contains("joined gossip") || a.logs.Contains("reached no other node")
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
// by default) and the node's next push/pull (every 30s) let it back in.
// The test makes both long, so only the reclaim time and the refusing
// members' retry can.
func TestRestartAtNewGossipAddress(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.tuneGossip = func(mc *memberlist.Config) {
		mc.GossipToTheDeadTime = 10 * time.Minute
		// No periodic push/pull to carry the restarted node's state again
		// after its first announcement: production's comes every 30s.
		mc.PushPullInterval = 10 * time.Minute
	}
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

// suffrage is name's suffrage in n's latest configuration ("" if absent).
func suffrage(n *Node, name string) string {
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return ""
	}
	for _, s := range fut.Configuration().Servers {
		if string(s.ID) == name {
			return s.Suffrage.String()
		}
	}
	return ""
}

// A voter that comes back with an emptied data directory (a lost PVC)
// under its name and raft address holds none of the log it acknowledged,
// so it must not vote or count toward a quorum: the leader makes it a
// non-voter until it has caught up, then a voter again, and no
// acknowledged write is lost when another original node stops afterwards.
func TestEmptiedVoterVotesOnlyOnceCaughtUp(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	x := c.others(l)[0]
	waitFor(t, "the leader to record every follower's data directory", func() bool {
		for _, n := range c.others(l) {
			if l.node.recordedDataDir(n.name) != n.node.dataDir {
				return false
			}
		}
		return true
	})
	var keys []string
	var last uint64
	for i := range 20 {
		k := fmt.Sprintf("acked-%d", i)
		last = l.propose(t, ctx, k)
		keys = append(keys, k)
	}
	if err := x.node.WaitApplied(ctx, last); err != nil {
		t.Fatal(err)
	}
	gossipAt := x.node.gossipAddr()
	_ = x.node.Shutdown()
	for i := range 5 {
		k := fmt.Sprintf("while-down-%d", i)
		l.propose(t, ctx, k)
		keys = append(keys, k)
	}

	// Same name, raft and gossip address; empty stores. Its raft is cut
	// off so that it stays behind for as long as the test needs.
	back := c.add(x.name, haOpts{expect: 3, gossip: true, gossipAt: gossipAt, join: []string{l.node.gossipAddr()}, sameAddr: true, raftCut: true})
	if back.node.dataDir == x.node.dataDir {
		t.Fatal("an emptied data directory kept its identity")
	}
	waitFor(t, x.name+" to be demoted to non-voter", func() bool { return suffrage(l.node, x.name) == "Nonvoter" })
	time.Sleep(2*reconcileInterval + 500*time.Millisecond)
	if got := suffrage(l.node, x.name); got != "Nonvoter" {
		t.Fatalf("%s is %s while it has applied nothing", x.name, got)
	}
	if back.node.AppliedIndex() >= last {
		t.Fatalf("%s caught up while cut off", x.name)
	}
	if back.logs.Contains("bootstrapped the cluster") {
		t.Fatal("the emptied node bootstrapped a cluster of its own")
	}

	c.reconnectRaft(back)
	waitFor(t, x.name+" to be a voter again", func() bool { return suffrage(l.node, x.name) == "Voter" })
	if back.node.AppliedIndex() < last {
		t.Fatalf("%s promoted at applied index %d, before the last acknowledged write %d", x.name, back.node.AppliedIndex(), last)
	}
	if l.node.recordedDataDir(x.name) != back.node.dataDir {
		t.Fatal("the new data directory was not recorded")
	}

	// Stop the leader, an original node: the two left hold every write.
	_ = l.node.Shutdown()
	rest := c.running()
	nl := c.leader(rest...)
	final := nl.propose(t, ctx, "after-leader-stop")
	for _, n := range rest {
		if err := n.node.WaitApplied(ctx, final); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if kv, _, err := n.fsm.Get(testKey(k), 0); err != nil || kv == nil {
				t.Fatalf("%s lost acknowledged write %s: %v", n.name, k, err)
			}
		}
	}
}

// addressOf is name's raft address in n's latest configuration.
func addressOf(n *Node, name string) raft.ServerAddress {
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return ""
	}
	for _, s := range fut.Configuration().Servers {
		if string(s.ID) == name {
			return s.Address
		}
	}
	return ""
}

// A server restarted at another raft address (by hand, with another
// --raft-addr) is moved there once the node at the new address proves to
// be it: same name, raft state of this cluster, the recorded data
// directory. A node that claims the name at a new address with no raft
// state proves nothing and is refused, saying what to do instead.
func TestRaftAddressChangeNeedsProof(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	x := c.others(l)[0]
	oldAddr := x.addr
	waitFor(t, "the leader to record "+x.name+"'s data directory", func() bool { return l.node.recordedDataDir(x.name) == x.node.dataDir })
	before := l.propose(t, ctx, "before-move")
	if err := x.node.WaitApplied(ctx, before); err != nil {
		t.Fatal(err)
	}
	gossipAt := x.node.gossipAddr()
	_ = x.node.Shutdown()
	waitFor(t, "the leader to report "+x.name+" failed", func() bool { return memberStatus(l.node, x.name) == StatusFailed })

	// An empty node under the name, at a new raft address: refused.
	empty := c.add(x.name, haOpts{gossip: true, gossipAt: gossipAt, join: []string{l.node.gossipAddr()}, raftAt: "inmem-claimant"})
	waitFor(t, "the leader to refuse the move", func() bool { return l.logs.Contains("cannot prove it is the member it names") })
	if got := addressOf(l.node, x.name); got != oldAddr {
		t.Fatalf("%s moved to %s on an empty node's word", x.name, got)
	}
	_ = empty.node.Shutdown()
	waitFor(t, "the leader to report the claimant failed", func() bool { return memberStatus(l.node, x.name) == StatusFailed })

	// The real node, with its state, at a new raft address: moved.
	moved := c.add(x.name, haOpts{gossip: true, gossipAt: gossipAt, join: []string{l.node.gossipAddr()}, raftAt: "inmem-moved", state: x})
	for _, n := range c.others(x, empty, moved) {
		waitFor(t, n.name+" to see "+x.name+" at its new raft address", func() bool { return addressOf(n.node, x.name) == moved.addr })
	}
	waitVoters(t, names(c.others(x, empty)...), c.others(x, empty)...)
	l = c.leader(c.others(x, empty)...)
	after := l.propose(t, ctx, "after-move")
	if err := moved.node.WaitApplied(ctx, after); err != nil {
		t.Fatalf("the moved node does not replicate: %v", err)
	}
	// It counts in the quorum at its new address: with the other original
	// follower stopped, the leader and the moved node still commit.
	for _, n := range c.others(x, empty, moved, l) {
		_ = n.node.Shutdown()
	}
	final := c.leader(l, moved).propose(t, ctx, "two-of-three")
	if err := moved.node.WaitApplied(ctx, final); err != nil {
		t.Fatal(err)
	}
}

// The same over real TCP, TLS and bolt, the way a pod with a lost PVC
// comes back: same name and raft address, an emptied data directory, a
// new gossip address. The leader sees the new directory identity over the
// internal RPC, demotes the node, and makes it a voter again once it has
// caught up; every acknowledged write survives the leader stopping.
func TestEmptiedVoterOverTCP(t *testing.T) {
	ctx := testCtx(t)
	c := newTCPCluster(t, 3)
	nodes := c.startAll()
	leader := func(among ...*Node) *Node { return tcpLeader(t, among...) }
	logs := c.logs
	start := c.start
	l := leader(nodes...)
	xi := slices.IndexFunc(nodes, func(n *Node) bool { return n != l })
	x := nodes[xi]
	waitFor(t, "the leader to record "+x.cfg.NodeName+"'s data directory", func() bool { return l.recordedDataDir(x.cfg.NodeName) == x.dataDir })
	var keys []string
	var last uint64
	for i := range 10 {
		k := fmt.Sprintf("tcp-acked-%d", i)
		res, err := l.Propose(ctx, putCmd(k, "v"))
		if err != nil || res.Err != nil {
			t.Fatalf("Propose: %v %v", err, res)
		}
		keys, last = append(keys, k), res.Revision
	}
	if err := x.WaitApplied(ctx, last); err != nil {
		t.Fatal(err)
	}
	_ = x.Shutdown()
	back, err := start(xi, t.TempDir(), freeAddr(t)) // emptied data directory, new gossip address
	if err != nil {
		t.Fatal(err)
	}
	ll := logs[slices.Index(nodes, l)]
	waitFor(t, "the leader to demote the emptied voter", func() bool { return ll.Contains("it is a non-voter until it has caught up") })
	waitFor(t, x.cfg.NodeName+" to be a voter again", func() bool { return suffrage(l, x.cfg.NodeName) == "Voter" })
	if back.AppliedIndex() < last {
		t.Fatalf("promoted at applied index %d, before the last acknowledged write %d", back.AppliedIndex(), last)
	}
	_ = l.Shutdown()
	var rest []*Node
	for _, n := range nodes {
		if n != l && n != x {
			rest = append(rest, n)
		}
	}
	rest = append(rest, back)
	nl := leader(rest...)
	res, err := nl.Propose(ctx, putCmd("tcp-after-leader-stop", "v"))
	if err != nil || res.Err != nil {
		t.Fatalf("Propose after the leader stopped: %v %v", err, res)
	}
	for _, n := range rest {
		if err := n.WaitApplied(ctx, res.Revision); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if kv, _, err := n.fsm.Get(testKey(k), 0); err != nil || kv == nil {
				t.Fatalf("%s lost acknowledged write %s: %v", n.cfg.NodeName, k, err)
			}
		}
	}
}
