package cluster

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestStatusCountsALeadershipTransfer: after a leadership transfer every
// node has counted one more leader than before, the new leader reports
// itself as Leader in a later term, and a follower names it.
func TestStatusCountsALeadershipTransfer(t *testing.T) {
	c := newInmemCluster(t, 3, true)
	li := c.leader(t)
	old := c.nodes[li]

	before := make([]Status, len(c.nodes))
	for i, n := range c.nodes {
		before[i] = n.Status()
		if before[i].LeaderChanges < 1 {
			t.Fatalf("%s: LeaderChanges = %d with a leader known, want >= 1", before[i].Node, before[i].LeaderChanges)
		}
		if want := old.cfg.NodeName; before[i].Leader != want {
			t.Fatalf("%s: Leader = %q, want %q", before[i].Node, before[i].Leader, want)
		}
	}
	if st := before[li]; st.State != raft.Leader.String() || st.LastContact != 0 || st.Elections < 1 {
		t.Fatalf("leader's status %+v: want state Leader, last contact 0, at least one election", st)
	}

	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatalf("LeadershipTransfer: %v", err)
	}
	ni := c.leader(t)
	if ni == li {
		t.Fatalf("leader is still %s after the transfer", old.cfg.NodeName)
	}
	waitFor(t, "every node to count the new leader", func() bool {
		for i, n := range c.nodes {
			if n.Status().LeaderChanges <= before[i].LeaderChanges {
				return false
			}
		}
		return true
	})
	after := c.nodes[ni].Status()
	if after.State != raft.Leader.String() || after.Term <= before[li].Term {
		t.Fatalf("new leader's status %+v: want state Leader in a term after %d", after, before[li].Term)
	}
	if after.Elections <= before[ni].Elections {
		t.Fatalf("new leader's elections = %d, was %d: its candidacy was not counted", after.Elections, before[ni].Elections)
	}
	for i, n := range c.nodes {
		if i == ni {
			continue
		}
		st := n.Status()
		if st.State != raft.Follower.String() || st.Leader != c.nodes[ni].cfg.NodeName || st.LastContact < 0 {
			t.Fatalf("follower's status %+v: want a follower that names %s and has heard from it", st, c.nodes[ni].cfg.NodeName)
		}
		if st.CommitIndex < st.AppliedIndex {
			t.Fatalf("follower's status %+v: applied beyond the commit index", st)
		}
	}
}

// TestStatusCounters: the filter counts named leaders and candidacies,
// not a lost leader or other states, and forwards nothing.
func TestStatusCounters(t *testing.T) {
	var c raftCounters
	for _, d := range []any{
		raft.LeaderObservation{LeaderID: "a"},
		raft.LeaderObservation{}, // leader lost: not a change to a leader
		raft.LeaderObservation{LeaderID: "b"},
		raft.Candidate,
		raft.Follower,
		raft.Leader,
		raft.Candidate,
		raft.FailedHeartbeatObservation{PeerID: "x"},
	} {
		if c.count(&raft.Observation{Data: d}) {
			t.Fatalf("count forwarded %#v", d)
		}
	}
	if got := c.leaderChanges.Load(); got != 2 {
		t.Fatalf("leaderChanges = %d, want 2", got)
	}
	if got := c.elections.Load(); got != 2 {
		t.Fatalf("elections = %d, want 2", got)
	}
}
