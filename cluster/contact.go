package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Raft's own view of which followers it reaches, on the leader. Gossip
// (memberlist) can report a node failed while raft still replicates to it
// (a gossip-only partition, a stuck UDP path), and the reverse; removing a
// voter, or counting it as alive for a quorum check, is decided with both.
//
// hashicorp/raft v1.7.3 exposes no per-follower last contact, but its
// leader emits a FailedHeartbeatObservation for every failed heartbeat to a
// peer (carrying the peer's last contact) and one
// ResumedHeartbeatObservation when heartbeats succeed again. A failing
// peer keeps producing failures, at most every HeartbeatTimeout/2 when the
// dial is refused and every transport timeout when packets vanish; the
// single "resumed" may be dropped if the buffer is full, so a failure
// older than contactStale counts as stale and the peer as reached again.

const (
	// contactStale is how long one failed heartbeat keeps a peer
	// unreachable without a newer failure: above the transport's I/O
	// timeout, the longest a single failing heartbeat can take.
	contactStale = 2 * transportTimeout
	// contactBuffer is the observation channel's capacity; the drain loop
	// only updates a map, so it rarely fills.
	contactBuffer = 256
)

// lostPeer is a follower raft's heartbeats currently fail to reach.
type lostPeer struct {
	since       time.Time // its last successful contact (first failure if none)
	lastFailure time.Time // the newest failed heartbeat
}

// raftContact tracks, on the leader, the followers raft cannot reach.
type raftContact struct {
	mu   sync.Mutex
	lost map[raft.ServerID]lostPeer
	// clock is time.Now (tests may replace it).
	clock func() time.Time
}

func newRaftContact() *raftContact {
	return &raftContact{lost: map[raft.ServerID]lostPeer{}, clock: time.Now}
}

// observe applies one observation.
func (c *raftContact) observe(o raft.Observation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		p, ok := c.lost[d.PeerID]
		if !ok {
			p.since = d.LastContact
			if p.since.IsZero() {
				p.since = now
			}
		}
		p.lastFailure = now
		c.lost[d.PeerID] = p
	case raft.ResumedHeartbeatObservation:
		delete(c.lost, d.PeerID)
	case raft.RaftState:
		// Replication restarts with every leadership: start afresh.
		clear(c.lost)
	}
}

// unreachable reports whether raft's heartbeats to id are failing, and
// since when the peer has not been reached.
func (c *raftContact) unreachable(id raft.ServerID) (since time.Time, lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.lost[id]
	if !ok || c.clock().Sub(p.lastFailure) > contactStale {
		return time.Time{}, false
	}
	return p.since, true
}

// watchContact feeds raft's heartbeat observations into n.contact.
func (n *Node) watchContact(ch <-chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case o := <-ch:
			n.contact.observe(o)
		case <-n.ctx.Done():
			return
		}
	}
}

// contactFilter selects the observations raftContact uses.
func contactFilter(o *raft.Observation) bool {
	switch o.Data.(type) {
	case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.RaftState:
		return true
	}
	return false
}

// raftReaches reports whether the leader's raft currently reaches id (this
// node itself always). On a follower it knows nothing and says true.
func (n *Node) raftReaches(id raft.ServerID) bool {
	if id == raft.ServerID(n.cfg.NodeName) {
		return true
	}
	_, lost := n.contact.unreachable(id)
	return !lost
}
