package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// TestResolveAnswersWhatTheLogSays: resolving an entry this node applied
// gives the result it was applied with; resolving other bytes at that
// index says the entry there is not ours.
func TestResolveAnswersWhatTheLogSays(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, nil)
	l := c.leader()
	cmd := putCmd("resolve-me", "v")
	res, err := l.node.Propose(ctx, cmd)
	if err != nil || res.Err != nil {
		t.Fatalf("Propose: %v %v", err, res)
	}
	got, err := l.node.resolve(ctx, res.Revision, cmd.Encode())
	if err != nil || got.Revision != res.Revision || got.KV == nil || string(got.KV.Value) != "v" {
		t.Fatalf("resolve of our own entry = %+v, %v; want the result at %d", got, err, res.Revision)
	}
	if _, err := l.node.resolve(ctx, res.Revision, putCmd("someone-else", "x").Encode()); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("resolve of other bytes = %v, want ErrNotApplied", err)
	}
}

// TestProposeOverwrittenAfterLeadershipLossIsNotApplied: a leader cut off
// from both followers appends a write it cannot commit and loses
// leadership; the others elect a leader that writes over that index. Once
// the old leader rejoins, its Propose answers ErrNotApplied (a definite "not
// written", safe to retry), not an unknown outcome, and the write exists
// nowhere.
func TestProposeOverwrittenAfterLeadershipLossIsNotApplied(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, nil)
	old := c.leader()
	var rest []*haNode
	for _, n := range c.nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	for _, n := range rest {
		c.disconnect(old, n)
	}
	type outcome struct {
		res *fsm.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := old.node.Propose(ctx, putCmd("lost-write", "v"))
		done <- outcome{res, err}
	}()
	waitFor(t, "the cut-off leader to step down", func() bool { return old.node.raft.State() != raft.Leader })
	next := c.leader(rest...)
	for i := range 3 {
		next.propose(t, ctx, "new-term-"+string(rune('a'+i)))
	}
	for _, n := range rest {
		old.trans.Connect(n.addr, n.trans)
		n.trans.Connect(old.addr, old.trans)
		c.router.partition(old.addr, n.addr, false)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Propose did not return after the partition healed")
	}
	if !errors.Is(o.err, ErrNotApplied) {
		t.Fatalf("Propose of the overwritten write = %+v, %v; want ErrNotApplied", o.res, o.err)
	}
	if !old.logs.Contains("overwritten by the next leader") {
		t.Fatal("the write was not resolved against the log (was it ever appended?)")
	}
	next.propose(t, ctx, "after-heal")
	for _, n := range c.nodes {
		waitFor(t, n.name+" to catch up", func() bool { return n.node.fsm.AppliedIndex() >= next.node.fsm.AppliedIndex() })
		if kv, _, err := n.node.fsm.Get(testKey("lost-write"), 0); err != nil || kv != nil {
			t.Fatalf("%s holds the write that was answered as not applied: %v %v", n.name, kv, err)
		}
	}
}
