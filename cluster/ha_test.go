package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Three nodes with BootstrapExpect 3, started at the same moment, form
// exactly one cluster: one leader, and the same three voters everywhere.
func TestBootstrapExpectFormsOneCluster(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprintf("round-%d", round), func(t *testing.T) {
			c := newHACluster(t)
			c.startGossipCluster(3, nil)
			l := c.leader()
			waitVoters(t, []string{"node-0", "node-1", "node-2"}, c.nodes...)
			for _, n := range c.nodes {
				if n != l && n.node.IsLeader() {
					t.Fatalf("two leaders: %s and %s", l.name, n.name)
				}
			}
			ctx := testCtx(t)
			rev := l.propose(t, ctx, "x")
			for _, n := range c.nodes {
				if err := n.node.WaitApplied(ctx, rev); err != nil {
					t.Fatalf("%s WaitApplied: %v", n.name, err)
				}
			}
		})
	}
}

// A node joining later is added as a voter by the leader, and a node that
// leaves gracefully is removed.
func TestJoinAndLeave(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, nil)
	l := c.leader()
	rev := l.propose(t, ctx, "before-join")

	// expect 0: never bootstraps, waits to be added.
	late := c.add("node-3", haOpts{gossip: true, join: []string{c.seed()}})
	all := []string{"node-0", "node-1", "node-2", "node-3"}
	waitVoters(t, all, c.nodes...)
	if err := late.node.WaitApplied(ctx, rev); err != nil {
		t.Fatalf("joiner did not catch up: %v", err)
	}

	// A follower leaves.
	var leaver *haNode
	for _, n := range c.nodes {
		if n != l && n != late {
			leaver = n
			break
		}
	}
	if err := leaver.node.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	rest := slices.DeleteFunc(slices.Clone(c.nodes), func(n *haNode) bool { return n == leaver })
	want := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == leaver.name })
	waitVoters(t, want, rest...)
	if err := leaver.node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leaver to be reported left", func() bool { return memberStatus(l.node, leaver.name) == StatusLeft })

	// The leader leaves: leadership moves, and it is removed.
	if err := l.node.Leave(ctx); err != nil {
		t.Fatalf("leader Leave: %v", err)
	}
	rest = slices.DeleteFunc(rest, func(n *haNode) bool { return n == l })
	want = slices.DeleteFunc(want, func(s string) bool { return s == l.name })
	waitVoters(t, want, rest...)
	_ = l.node.Shutdown()
	nl := c.leader(rest...)
	nl.propose(t, ctx, "after-leave")
}

// A single-node cluster's Leave keeps its only voter.
func TestLeaveSingleNode(t *testing.T) {
	c := newHACluster(t)
	n := c.add("solo", haOpts{expect: 1, gossip: true, bootstrap: []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "inmem-solo"}}})
	c.leader()
	if err := n.node.Leave(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := voters(n.node); !slices.Equal(got, []string{"solo"}) {
		t.Fatalf("voters after Leave = %v", got)
	}
}

// A failed node stays a voter until RemoveMember; RemoveMember refuses to
// break the quorum and unknown names.
func TestFailedNodeStaysUntilRemoved(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = -1 })
	l := c.leader()
	var dead, alive *haNode
	for _, n := range c.nodes {
		if n == l {
			continue
		}
		if dead == nil {
			dead = n
		} else {
			alive = n
		}
	}
	_ = dead.node.Shutdown() // no Leave: a crash, as far as gossip can tell
	waitFor(t, "the dead node to be reported failed", func() bool { return memberStatus(l.node, dead.name) == StatusFailed })
	// Let the leader reconcile a few times: nothing may change.
	time.Sleep(2*reconcileInterval + 500*time.Millisecond)
	if got := voters(l.node); len(got) != 3 {
		t.Fatalf("failed node was removed without RemoveMember: voters %v", got)
	}

	tests := []struct {
		name string
		via  *haNode
		arg  string
		want error
	}{
		{"unknown name is refused", l, "no-such-node", ErrUnknownMember},
		{"removing an alive voter while another is dead would lose the quorum", l, alive.name, ErrWouldLoseQuorum},
		{"removing an alive voter is refused from a follower too", alive, alive.name, ErrWouldLoseQuorum},
		{"a follower does not remove another member: only the leader does", alive, dead.name, ErrNotLeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.via.node.RemoveMember(ctx, tc.arg); !errors.Is(err, tc.want) {
				t.Fatalf("RemoveMember(%s) = %v, want %v", tc.arg, err, tc.want)
			}
		})
	}
	// The leader removes the dead one.
	if err := l.node.RemoveMember(ctx, dead.name); err != nil {
		t.Fatalf("RemoveMember(%s): %v", dead.name, err)
	}
	waitVoters(t, []string{l.name, alive.name}, l, alive)
	l.propose(t, ctx, "after-remove")
}

// The autopilot rule removes a voter that has failed for DeadServerTimeout.
func TestAutopilotRemovesDeadServer(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, func(cfg *Config) { cfg.DeadServerTimeout = 500 * time.Millisecond })
	l := c.leader()
	var dead *haNode
	var rest []*haNode
	for _, n := range c.nodes {
		if n != l && dead == nil {
			dead = n
		} else {
			rest = append(rest, n)
		}
	}
	_ = dead.node.Shutdown()
	waitVoters(t, []string{rest[0].name, rest[1].name}, rest...)
	waitFor(t, "the autopilot log line", func() bool { return l.logs.Contains("autopilot: removed a voter") })
	l.propose(t, ctx, "after-autopilot")
}

// Nodes of another cluster, with another gossip key, or with a duplicate
// name are refused with a clear log line, and the cluster is unharmed.
func TestIntrudersAreRefused(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, nil)
	l := c.leader()
	names := []string{"node-0", "node-1", "node-2"}

	wrongKey := make([]byte, 32)
	_, _ = rand.Read(wrongKey)
	tests := []struct {
		name string
		node string
		opts func(*Config)
		// logged is a substring expected in the intruder's log (or, with
		// onCluster, in some cluster node's log).
		logged    string
		onCluster bool
		// selfBootstrapped: the intruder has bootstrapped a cluster of its
		// own before joining.
		selfBootstrapped bool
		alsoOnCluster    string
	}{
		{
			name:   "wrong gossip key",
			node:   "intruder-key",
			opts:   func(cfg *Config) { cfg.GossipKey = wrongKey },
			logged: "gossip key does not match",
			// and the seed's side says why it dropped the messages
			alsoOnCluster: "not encrypted with this cluster's gossip key",
		},
		{
			name:      "other cluster id",
			node:      "intruder-cluster",
			opts:      func(cfg *Config) { cfg.ClusterID = "cluster-b" },
			logged:    "belongs to another cluster",
			onCluster: true,
		},
		{
			name:             "node with raft state of its own cluster",
			node:             "stranger",
			logged:           "raft state of another cluster",
			onCluster:        true,
			selfBootstrapped: true,
		},
		{
			name:      "duplicate name at another address",
			node:      "node-1",
			logged:    "duplicate node name",
			onCluster: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := haOpts{expect: 3, gossip: true, join: []string{c.seed()}, mutate: tc.opts}
			if tc.selfBootstrapped {
				o.expect = 0
				o.bootstrap = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(tc.node), Address: raft.ServerAddress("inmem-" + tc.node)}}
			}
			in := c.add(tc.node, o)
			waitFor(t, "the refusal log line", func() bool {
				if !tc.onCluster {
					return in.logs.Contains(tc.logged)
				}
				for _, n := range c.nodes[:3] {
					if n.logs.Contains(tc.logged) {
						return true
					}
				}
				return false
			})
			if tc.alsoOnCluster != "" {
				waitFor(t, "the cluster's refusal log line", func() bool {
					for _, n := range c.nodes[:3] {
						if n.logs.Contains(tc.alsoOnCluster) {
							return true
						}
					}
					return false
				})
			}
			// Give the intruder a few gossip rounds to do harm.
			time.Sleep(time.Second)
			for _, n := range c.nodes[:3] {
				for _, o := range c.nodes[:3] {
					if st := memberStatus(n.node, o.name); st != StatusAlive {
						t.Fatalf("%s sees %s as %q after the intruder", n.name, o.name, st)
					}
				}
			}
			_ = in.node.Shutdown()
			for _, n := range c.nodes[:3] {
				if got := voters(n.node); !slices.Equal(got, names) {
					t.Fatalf("%s voters = %v after intruder", n.name, got)
				}
				if tc.node != "node-1" && !tc.selfBootstrapped && memberStatus(n.node, tc.node) != "" {
					t.Fatalf("%s admitted %s to gossip", n.name, tc.node)
				}
				if !tc.selfBootstrapped && in.node.hasState() {
					t.Fatalf("intruder %s has raft state", tc.node)
				}
			}
			if fut := l.node.raft.GetConfiguration(); fut.Error() == nil {
				for _, s := range fut.Configuration().Servers {
					if s.Address == in.addr {
						t.Fatalf("intruder's raft address %s in the configuration", in.addr)
					}
				}
			}
			// Through whoever leads now: under a loaded test machine the
			// fast test timeouts may move leadership, which is no harm.
			c.leader(c.nodes[:3]...).propose(t, ctx, "after-"+tc.node)
		})
	}
}

// ReadIndex on a follower returns an index at or above every write
// acknowledged before the call, applied locally; concurrent callers share
// remote rounds; a follower cut off from the leader fails instead of
// answering.
func TestFollowerReadIndex(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	var conf []raft.Server
	for i := range 3 {
		name := fmt.Sprintf("node-%d", i)
		conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress("inmem-" + name)})
	}
	for i := range 3 {
		c.add(fmt.Sprintf("node-%d", i), haOpts{bootstrap: conf})
	}
	l := c.leader()
	var f *haNode
	for _, n := range c.nodes {
		if n != l {
			f = n
			break
		}
	}

	t.Run("index covers an acknowledged write and is applied", func(t *testing.T) {
		for i := range 5 {
			rev := l.propose(t, ctx, fmt.Sprintf("k-%d", i))
			idx, err := f.node.ReadIndex(ctx)
			if err != nil {
				t.Fatalf("follower ReadIndex: %v", err)
			}
			if idx < rev {
				t.Fatalf("follower read index %d < acknowledged write %d", idx, rev)
			}
			if f.node.AppliedIndex() < idx {
				t.Fatalf("follower applied %d < its read index %d", f.node.AppliedIndex(), idx)
			}
			if kv, _, err := f.fsm.Get(testKey(fmt.Sprintf("k-%d", i)), 0); err != nil || kv == nil || kv.ModRevision != rev {
				t.Fatalf("follower Get = %+v, %v", kv, err)
			}
		}
	})

	t.Run("concurrent callers share rounds", func(t *testing.T) {
		rev := l.propose(t, ctx, "shared")
		release := make(chan struct{})
		// Hold every round until all callers have joined (see the leader's
		// TestReadIndexSharesRounds for the bound this gives).
		hook := func() { <-release }
		f.node.remoteHook.Store(&hook)
		defer f.node.remoteHook.Store(nil)
		roundsBefore, joinsBefore := f.node.remote.rounds.Load(), f.node.remote.joins.Load()
		const callers = 30
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				idx, err := f.node.ReadIndex(ctx)
				if err == nil && idx < rev {
					err = fmt.Errorf("index %d < write %d", idx, rev)
				}
				errs <- err
			}()
		}
		waitFor(t, "all callers to join", func() bool { return f.node.remote.joins.Load()-joinsBefore == callers })
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if rounds := f.node.remote.rounds.Load() - roundsBefore; rounds == 0 || rounds > maxRoundsInFlight+1 {
			t.Fatalf("%d callers used %d remote rounds, want 1 to %d", callers, rounds, maxRoundsInFlight+1)
		}
	})

	t.Run("a follower cut off from the leader cannot serve", func(t *testing.T) {
		l.propose(t, ctx, "before-partition")
		c.disconnect(f, l)
		// Writes acknowledged now reach only the leader and the other
		// follower; f must not answer with an index it cannot confirm.
		l.propose(t, ctx, "during-partition")
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		idx, err := f.node.ReadIndex(rctx)
		if err == nil {
			t.Fatalf("partitioned follower answered ReadIndex with %d", idx)
		}
		if !isNoLeaderOrTimeout(err) {
			t.Fatalf("partitioned follower: %v, want ErrNoLeader or ErrTimeout", err)
		}
	})
}

// Members lists every node with its role and applied index.
func TestMembers(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	c.startGossipCluster(3, nil)
	l := c.leader()
	rev := l.propose(t, ctx, "m")
	for _, n := range c.nodes {
		if err := n.node.WaitApplied(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "gossip to report every node alive everywhere", func() bool {
		for _, n := range c.nodes {
			for _, o := range c.nodes {
				if memberStatus(n.node, o.name) != StatusAlive {
					return false
				}
			}
		}
		return true
	})
	for _, via := range c.nodes {
		ms, err := via.node.Members(ctx)
		if err != nil {
			t.Fatalf("Members via %s: %v", via.name, err)
		}
		if len(ms) != 3 {
			t.Fatalf("Members via %s = %+v", via.name, ms)
		}
		leaders := 0
		for i, m := range ms {
			if want := fmt.Sprintf("node-%d", i); m.Name != want {
				t.Fatalf("member %d is %q, want %q (sorted)", i, m.Name, want)
			}
			if !m.Voter || m.Status != StatusAlive || m.AppliedIndex < rev || m.RaftAddr != "inmem-"+m.Name || m.APIAddr != "api-"+m.Name+":6443" {
				t.Errorf("via %s: member %+v", via.name, m)
			}
			switch m.RaftState {
			case "Leader":
				leaders++
				if m.Name != l.name || m.LastContact != 0 {
					t.Errorf("leader entry %+v", m)
				}
			case "Follower":
				if m.LastContact < 0 {
					t.Errorf("follower %s has unknown last contact", m.Name)
				}
			default:
				t.Errorf("member %s raft state %q", m.Name, m.RaftState)
			}
		}
		if leaders != 1 {
			t.Errorf("via %s: %d leaders", via.name, leaders)
		}
	}
	for _, n := range c.nodes {
		addr, err := n.node.LeaderAPIAddr()
		if err != nil || addr != "api-"+l.name+":6443" {
			t.Errorf("%s LeaderAPIAddr = %q, %v", n.name, addr, err)
		}
	}
}

// A follower that fell behind the compacted log catches up by snapshot
// install, then serves linearizable reads again.
func TestLaggingFollowerCatchesUpBySnapshot(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	var conf []raft.Server
	for i := range 3 {
		name := fmt.Sprintf("node-%d", i)
		conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress("inmem-" + name)})
	}
	for i := range 3 {
		c.add(fmt.Sprintf("node-%d", i), haOpts{bootstrap: conf, mutate: func(cfg *Config) { cfg.TrailingLogs = 2 }})
	}
	l := c.leader()
	var f *haNode
	for _, n := range c.nodes {
		if n != l {
			f = n
			break
		}
	}
	l.propose(t, ctx, "before")
	c.disconnect(f, l)
	var last uint64
	for i := range 20 {
		last = l.propose(t, ctx, fmt.Sprintf("while-away-%d", i))
	}
	if err := l.node.snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// Reconnect.
	f.trans.Connect(l.addr, l.trans)
	l.trans.Connect(f.addr, f.trans)
	c.router.partition(f.addr, l.addr, false)
	if err := f.node.WaitApplied(ctx, last); err != nil {
		t.Fatalf("lagging follower did not catch up: %v", err)
	}
	// raft records the installed snapshot just after restoring the FSM.
	waitFor(t, "the follower to record the installed snapshot", func() bool {
		return f.node.raft.Stats()["last_snapshot_index"] != "0"
	})
	if kv, _, err := f.fsm.Get(testKey("while-away-0"), 0); err != nil || kv == nil {
		t.Fatalf("follower lacks a write from the snapshot: %v %v", kv, err)
	}
	if idx, err := f.node.ReadIndex(ctx); err != nil || idx < last {
		t.Fatalf("follower ReadIndex after catch-up = %d, %v", idx, err)
	}
}
