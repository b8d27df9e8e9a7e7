package cluster

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// others returns the nodes of c except those given.
func (c *haCluster) others(except ...*haNode) []*haNode {
	var out []*haNode
	for _, n := range c.nodes {
		if !slices.Contains(except, n) {
			out = append(out, n)
		}
	}
	return out
}

func names(nodes ...*haNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.name)
	}
	return out
}

// An operator's removal is durable: a later leader does not re-add the
// removed node although gossip still shows it alive, and the removed node
// reports itself outside the configuration. Only when the name comes back
// with an empty data directory is the marker cleared and the node added.
func TestRemovedMemberStaysOutAcrossLeaderChange(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	rest := c.others(l)
	gone, other := rest[0], rest[1]
	gossipAt := gone.node.gossipAddr()

	if err := l.node.RemoveMember(ctx, gone.name); err != nil {
		t.Fatalf("RemoveMember(%s): %v", gone.name, err)
	}
	waitVoters(t, names(l, other), l, other)
	waitFor(t, "the removed node to know it is out", func() bool { return !gone.node.InConfiguration() })
	if err := gone.node.CheckMember(); !errors.Is(err, ErrNotMember) {
		t.Fatalf("removed node CheckMember = %v, want ErrNotMember", err)
	}
	if !other.node.InConfiguration() || !l.node.InConfiguration() {
		t.Fatal("a remaining member reports itself outside the configuration")
	}

	// Leadership moves to the other node; its gossip still shows the
	// removed node alive, and that node still has raft state.
	if err := l.node.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("LeadershipTransfer: %v", err)
	}
	nl := c.leader(l, other)
	if nl != other {
		t.Fatalf("leader after transfer = %s, want %s", nl.name, other.name)
	}
	if st := memberStatus(nl.node, gone.name); st != StatusAlive {
		t.Fatalf("the new leader's gossip status of the removed node = %q, want alive", st)
	}
	waitFor(t, "the new leader to refuse the removed node", func() bool { return nl.logs.Contains("an operator removed it") })
	time.Sleep(2 * reconcileInterval)
	if got := voters(nl.node); slices.Contains(got, gone.name) {
		t.Fatalf("removed node re-added by the new leader: voters %v", got)
	}

	// Stop it and start the same name with an empty data directory (a new
	// in-memory store): the marker is cleared and it is added again.
	_ = gone.node.Shutdown()
	back := c.add(gone.name, haOpts{gossip: true, gossipAt: gossipAt, join: []string{nl.node.gossipAddr()}, sameAddr: true})
	waitVoters(t, names(l, other, back), l, other, back)
	waitFor(t, "the marker to be cleared", func() bool { return nl.logs.Contains("its removal marker is cleared") })
	if nl.node.isRemoved(gone.name) {
		t.Fatal("removal marker still present after the node came back empty")
	}
	waitFor(t, "the returned node to be in the configuration", back.node.InConfiguration)
	nl.propose(t, ctx, "after-return")
}

// Gossip silence alone never costs a vote: a voter whose gossip is down
// while raft still reaches it stays, however long gossip reports it
// failed. Once raft loses it too, autopilot removes it.
func TestGossipFailureAloneDoesNotRemoveVoter(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = 300 * time.Millisecond })
	l := c.leader()
	rest := c.others(l)
	quiet := rest[0]

	// Gossip-only fault: the node's memberlist stops, raft runs on.
	_ = quiet.node.gossip.ml.Shutdown()
	waitFor(t, "the leader's gossip to report the node failed", func() bool { return memberStatus(l.node, quiet.name) == StatusFailed })
	waitFor(t, "the autopilot to decline", func() bool { return l.logs.Contains("autopilot: not removing a voter raft still reaches") })
	if got := voters(l.node); len(got) != 3 {
		t.Fatalf("voter removed on gossip silence alone: voters %v", got)
	}
	rev := l.propose(t, ctx, "still-replicated")
	if err := quiet.node.WaitApplied(ctx, rev); err != nil {
		t.Fatalf("the gossip-silent voter does not replicate: %v", err)
	}

	// Now raft loses it as well.
	for _, n := range c.others(quiet) {
		c.disconnect(n, quiet)
	}
	waitVoters(t, names(c.others(quiet)...), c.others(quiet)...)
	waitFor(t, "the autopilot log line", func() bool {
		// On whichever node leads by then (a loaded machine may elect anew).
		return slices.ContainsFunc(c.others(quiet), func(n *haNode) bool { return n.logs.Contains("autopilot: removed a voter") })
	})
}

// Leave never forces past the quorum: with one voter already dead, a
// second voter that leaves stays a voter (ErrWouldLoseQuorum), is seen as
// failed rather than left, and the leader does not remove it later.
func TestLeaveKeepsQuorum(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	rest := c.others(l)
	dead, leaver := rest[0], rest[1]
	_ = dead.node.Shutdown()
	waitFor(t, "the dead node to be reported failed", func() bool { return memberStatus(l.node, dead.name) == StatusFailed })

	if err := leaver.node.Leave(ctx); !errors.Is(err, ErrWouldLoseQuorum) {
		t.Fatalf("Leave with a dead peer = %v, want ErrWouldLoseQuorum", err)
	}
	waitFor(t, "the leaver to be reported failed", func() bool { return memberStatus(l.node, leaver.name) == StatusFailed })
	time.Sleep(2 * reconcileInterval)
	if got := voters(l.node); len(got) != 3 {
		t.Fatalf("voters after a refused Leave = %v, want all three", got)
	}

	// The leader itself may not leave either: it keeps its leadership.
	if err := l.node.Leave(ctx); !errors.Is(err, ErrWouldLoseQuorum) {
		t.Fatalf("leader Leave with a dead peer = %v, want ErrWouldLoseQuorum", err)
	}
	if !l.node.IsLeader() {
		t.Fatal("a refused Leave handed leadership away")
	}
	l.propose(t, ctx, "after-refused-leave")
}

// A removal right after a peer is killed must not count that peer: raft's
// heartbeats to it have not failed yet, gossip still shows it alive, and a
// leader elected a moment ago has no failures recorded at all. The leader
// asks each voter directly, so the dead one is not counted, and a Leave
// that would need it is refused instead of appending a configuration that
// only the dead peer could commit.
func TestRemovalRightAfterAPeerDies(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	rest := c.others(l)
	dead, leaver := rest[0], rest[1]
	members := l.node.gossip.snapshot()
	_ = dead.node.Shutdown()

	// The views a fresh leader has in that moment: gossip shows every
	// member alive, and raft has recorded no failed heartbeat.
	for name, m := range members {
		m.status = StatusAlive
		members[name] = m
	}
	l.node.contact.observe(raft.Observation{Data: raft.Leader})
	conf, err := l.node.latestConf()
	if err != nil {
		t.Fatal(err)
	}
	if voters, healthy := l.node.voterHealth(conf, members, ""); voters != 3 || healthy != 2 {
		t.Fatalf("voterHealth right after a peer died = %d of %d healthy, want 2 of 3", healthy, voters)
	}
	if err := l.node.removalKeepsQuorum(conf, members, raft.ServerID(leaver.name)); !errors.Is(err, ErrWouldLoseQuorum) {
		t.Fatalf("removing %s with %s just dead = %v, want ErrWouldLoseQuorum", leaver.name, dead.name, err)
	}

	if err := leaver.node.Leave(ctx); !errors.Is(err, ErrWouldLoseQuorum) {
		t.Fatalf("Leave right after a peer died = %v, want ErrWouldLoseQuorum", err)
	}
	if got := voters(l.node); len(got) != 3 {
		t.Fatalf("voters after a refused Leave = %v, want all three", got)
	}
	l.propose(t, ctx, "after-refused-leave")
}

// A node removed while it was cut off never receives its removal from
// raft; it learns it from the leader over the internal RPC and stops
// counting itself a member.
func TestRemovedWhileAwayLearnsFromLeader(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	away := c.others(l)[0]
	for _, n := range c.others(away) {
		c.disconnect(n, away)
	}
	if err := l.node.RemoveMember(ctx, away.name); err != nil {
		t.Fatalf("RemoveMember(%s): %v", away.name, err)
	}
	waitVoters(t, names(c.others(away)...), c.others(away)...)
	if got := voters(away.node); !slices.Contains(got, away.name) {
		t.Fatalf("the cut-off node saw its removal through raft: %v", got)
	}
	// Only the internal RPC heals.
	for _, n := range c.others(away) {
		c.router.partition(n.addr, away.addr, false)
	}
	waitFor(t, "the removed node to learn it is out", func() bool { return !away.node.InConfiguration() })
}
