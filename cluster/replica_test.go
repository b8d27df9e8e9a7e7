package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestReplicaJoinsAsNonvoter: a read replica started beside three voters
// that bootstrap with expect 3 is never counted among the initial voters;
// the leader adds it as a non-voter and never promotes it, however caught
// up it is (the data-directory rule promotes other caught-up non-voters);
// it applies the log and serves read-index reads; Members reports its
// role; it never leads; and when it stops, the voters keep their quorum.
func TestReplicaJoinsAsNonvoter(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	replicaOpts := haOpts{expect: 3, gossip: true, gossipAt: addrs[3], join: addrs, mutate: func(cfg *Config) { cfg.Replica = true }}
	// The replica starts first, with the voters' expect: bootstrap must
	// still pick the three voters alone.
	replica := c.add("node-a-replica", replicaOpts)
	for i := range 3 {
		c.add("node-"+string(rune('b'+i)), haOpts{expect: 3, gossip: true, gossipAt: addrs[i], join: addrs})
	}
	voterNodes := slices.DeleteFunc(slices.Clone(c.nodes), func(n *haNode) bool { return n == replica })
	l := c.leader(voterNodes...)
	waitVoters(t, []string{"node-b", "node-c", "node-d"}, voterNodes...)
	waitFor(t, "the replica added as a non-voter", func() bool { return suffrage(l.node, "node-a-replica") == raft.Nonvoter.String() })

	rev := l.propose(t, ctx, "x")
	if err := replica.node.WaitApplied(ctx, rev); err != nil {
		t.Fatalf("the replica does not apply the log: %v", err)
	}
	idx, err := replica.node.ReadIndex(ctx)
	if err != nil || idx < rev {
		t.Fatalf("read index on the replica: %d, %v (want at least %d)", idx, err, rev)
	}
	// Several reconcile rounds later it is still a non-voter.
	time.Sleep(3 * reconcileInterval)
	if s := suffrage(l.node, "node-a-replica"); s != raft.Nonvoter.String() {
		t.Fatalf("the replica became a %s", s)
	}
	if replica.node.IsLeader() || replica.node.raft.State() == raft.Candidate {
		t.Fatal("the replica leads or campaigns")
	}
	if replica.node.StandsForControllers() {
		t.Fatal("the replica stands for the controllers' lease")
	}
	ms, err := l.node.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if want := m.Name == "node-a-replica"; m.Replica != want || m.Voter == want {
			t.Fatalf("member %s: replica %v, voter %v", m.Name, m.Replica, m.Voter)
		}
	}

	// Cut off from the leader, the replica stops vouching for its local
	// state within the bound, as a follower does (--max-stale-read), and
	// vouches again once the log reaches it.
	const bound = 500 * time.Millisecond
	if !replica.node.LeaderContactWithin(bound) {
		t.Fatal("a connected replica does not vouch for its state")
	}
	c.disconnectRaft(replica)
	waitFor(t, "the cut-off replica to stop vouching for its state", func() bool { return !replica.node.LeaderContactWithin(bound) })
	l.propose(t, ctx, "while-cut-off")
	c.reconnectRaft(replica)
	waitFor(t, "the replica to vouch again", func() bool { return replica.node.LeaderContactWithin(bound) })

	// The replica stops: the three voters keep committing.
	if err := replica.node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	l.propose(t, ctx, "after-the-replica")
}

// TestReplicaConfig: a replica must join an existing cluster.
func TestReplicaConfig(t *testing.T) {
	for _, c := range []struct {
		name  string
		mod   func(*Config)
		valid bool
	}{
		{"joins", func(*Config) {}, true},
		{"no gossip", func(c *Config) { c.GossipAddr, c.Join = "", nil }, false},
		{"bootstraps itself", func(c *Config) { c.BootstrapExpect, c.Join = 1, nil }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.NodeName, cfg.DataDir, cfg.Replica, cfg.BootstrapExpect = "r", t.TempDir(), true, 0
			cfg.GossipAddr, cfg.Join, cfg.GossipKey, cfg.ClusterID = "127.0.0.1:7946", []string{"127.0.0.1:7947"}, make([]byte, 32), "c"
			c.mod(cfg)
			err := cfg.validateGossip()
			if c.valid != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("validateGossip: %v, want valid %v", err, c.valid)
			}
		})
	}
}

// TestFiveVotersAndReplicas: five voters and two read replicas. The
// replicas join as non-voters; with two voters down the other three keep
// committing, and writes submitted through a replica commit too; with a
// third voter down nothing commits, however many replicas are up:
// replicas never count toward a quorum, and never take over.
func TestFiveVotersAndReplicas(t *testing.T) {
	ctx := testCtx(t)
	c := newHACluster(t)
	var addrs []string
	for range 7 {
		addrs = append(addrs, freeAddr(t))
	}
	var voters, replicas []*haNode
	for i := range 5 {
		voters = append(voters, c.add(fmt.Sprintf("voter-%d", i), haOpts{expect: 5, gossip: true, gossipAt: addrs[i], join: addrs[:5]}))
	}
	var names []string
	for _, v := range voters {
		names = append(names, v.name)
	}
	waitVoters(t, names, voters...)
	l := c.leader(voters...)
	for i := range 2 {
		replicas = append(replicas, c.add(fmt.Sprintf("replica-%d", i), haOpts{expect: 5, gossip: true, gossipAt: addrs[5+i], join: addrs[:5], mutate: func(cfg *Config) { cfg.Replica = true }}))
	}
	for _, r := range replicas {
		waitFor(t, r.name+" added as a non-voter", func() bool { return suffrage(l.node, r.name) == raft.Nonvoter.String() })
	}

	// Two voters down, never the leader: three of five still commit.
	down := 0
	for _, v := range voters {
		if v != l && down < 2 {
			if err := v.node.Shutdown(); err != nil {
				t.Fatal(err)
			}
			down++
		}
	}
	rev := l.propose(t, ctx, "three-of-five")
	res, err := replicas[0].node.Submit(ctx, putCmd("through-a-replica", "v"))
	if err != nil || res.Err != nil || res.Revision <= rev {
		t.Fatalf("a write submitted through a replica with three of five voters: %v %+v", err, res)
	}

	// A third voter down: two voters and two replicas make no quorum.
	for _, v := range voters {
		if v != l && v.node.ctx.Err() == nil {
			if err := v.node.Shutdown(); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if res, err := l.node.Propose(sctx, putCmd("no-quorum", "v")); err == nil {
		t.Fatalf("two voters and two replicas committed a write at %d", res.Revision)
	}
	for _, r := range replicas {
		if r.node.IsLeader() {
			t.Fatalf("%s leads", r.name)
		}
		if kv, _, _ := r.fsm.Get(testKey("no-quorum"), 0); kv != nil {
			t.Fatalf("%s applied a write without a quorum", r.name)
		}
	}
}
