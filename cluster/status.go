package cluster

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Status is one node's own view of raft, for operators and for the chaos
// tool (GET /debug/trustplane/raft). Counters start at zero when the node
// starts; compare two readings of the same process, never across restarts.
type Status struct {
	// Node is this node's name (its raft ServerID).
	Node string
	// State is raft's state: Leader, Follower, Candidate or Shutdown.
	State string
	// Term is raft's current term.
	Term uint64
	// Leader is the name of the leader this node knows, or empty.
	Leader string
	// LeaderChanges counts the times this node came to know a leader,
	// the first one included: each raft LeaderObservation that names a
	// leader. A leader lost and then found again (even the same node, in
	// a later term) counts again, so on a stable cluster it stays at 1.
	LeaderChanges uint64
	// Elections counts the times this node became a candidate. With
	// raft's pre-vote this includes pre-vote rounds that never raised
	// the term: each one means this node's heartbeat timer expired.
	Elections uint64
	// CommitIndex and AppliedIndex are raft's commit index and the FSM's
	// applied index.
	CommitIndex  uint64
	AppliedIndex uint64
	// LastContact is how long ago this node heard from a leader: zero on
	// the leader itself, and negative when a follower never has.
	LastContact time.Duration
	// Replica: this node is a read replica (Config.Replica).
	Replica bool
	// Formats are the cluster's versions of each format, as this node
	// last found them (ClusterFormats; nil before the first time).
	Formats []ClusterFormat
}

// ReplicationLag is how many committed entries the node has yet to
// apply: what a read served from its own state is behind by, as far as
// it knows. Together with LastContact (how old its knowledge of the
// commit index is) it bounds how stale the node is.
func (s Status) ReplicationLag() uint64 {
	if s.CommitIndex <= s.AppliedIndex {
		return 0
	}
	return s.CommitIndex - s.AppliedIndex
}

// raftCounters counts leadership events. Raft calls count from its own
// goroutines for every observation, before any channel send, so nothing
// is lost to a full buffer (unlike the node's wake-up observer).
type raftCounters struct {
	leaderChanges atomic.Uint64
	elections     atomic.Uint64
}

// count is a raft.FilterFn: it counts and forwards nothing.
func (c *raftCounters) count(o *raft.Observation) bool {
	switch d := o.Data.(type) {
	case raft.LeaderObservation:
		if d.LeaderID != "" {
			c.leaderChanges.Add(1)
		}
	case raft.RaftState:
		if d == raft.Candidate {
			c.elections.Add(1)
		}
	}
	return false
}

// Status reports this node's raft view. It takes no locks of ours and
// does no I/O, so it is cheap enough to poll.
func (n *Node) Status() Status {
	state := n.raft.State()
	_, leader := n.raft.LeaderWithID()
	s := Status{
		Node:          n.cfg.NodeName,
		State:         state.String(),
		Term:          n.raft.CurrentTerm(),
		Leader:        string(leader),
		LeaderChanges: n.counters.leaderChanges.Load(),
		Elections:     n.counters.elections.Load(),
		CommitIndex:   n.raft.CommitIndex(),
		AppliedIndex:  n.fsm.AppliedIndex(),
		LastContact:   -1,
		Replica:       n.cfg.Replica,
	}
	if v := n.formats.Load(); v != nil {
		s.Formats = v.found
	}
	switch lc := n.raft.LastContact(); {
	case state == raft.Leader:
		s.LastContact = 0
	case !lc.IsZero():
		s.LastContact = time.Since(lc)
	}
	return s
}
