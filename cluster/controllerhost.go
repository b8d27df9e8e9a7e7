package cluster

import (
	"time"

	"github.com/hashicorp/raft"
)

// standContact is how recently a follower must have heard from its leader
// to stand for the controllers: a few heartbeats, well inside the
// controllers' lease (api/controllers.Host), so a follower cut off from the
// log stops standing before its renewals would start failing anyway.
const standContact = 2 * time.Second

// StandsForControllers reports whether this node should stand for the
// controllers' lease now. The controllers run on one voter at a time, the
// holder of a Lease (api/controllers.Host); this is the one rule for which
// nodes may hold it, kept here because it reads raft's state:
//
//   - A read replica never stands: it never runs controllers.
//   - A follower voter stands while it hears from its leader: the
//     controllers' writes then reach the log through its API, and the
//     leader is left to order, append, fsync and apply (a leader that
//     also runs the controllers decodes every object written for their
//     informers, the largest part of its cost per write after raft's own).
//   - The leader stands only when no other voter can: when it finds no
//     other voter in the configuration that raft reaches and gossip (when
//     there is any) calls alive. A single voter, and a leader whose
//     followers are all gone, run the controllers themselves.
//
// Two nodes may both stand for a moment (a leader that has not yet seen a
// follower fail); the Lease picks one holder.
func (n *Node) StandsForControllers() bool {
	if n.cfg.Replica || n.ctx.Err() != nil {
		return false
	}
	switch n.raft.State() {
	case raft.Follower:
		lc := n.raft.LastContact()
		_, leader := n.raft.LeaderWithID()
		return leader != "" && !lc.IsZero() && time.Since(lc) <= standContact
	case raft.Leader:
		return !n.otherVoterStands()
	}
	return false
}

// otherVoterStands reports, on the leader, whether a voter other than this
// node is in the configuration, reached by raft's heartbeats and (with
// gossip) alive: one that stands for the controllers as a follower. An
// unreadable configuration counts as one, so that the leader does not take
// the controllers on a guess.
func (n *Node) otherVoterStands() bool {
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return true
	}
	var members map[string]member
	if n.gossip != nil {
		members = n.gossip.snapshot()
	}
	for _, s := range fut.Configuration().Servers {
		if s.Suffrage != raft.Voter || s.ID == raft.ServerID(n.cfg.NodeName) || !n.raftReaches(s.ID) {
			continue
		}
		if m, ok := members[string(s.ID)]; members != nil && (!ok || m.status != StatusAlive) {
			continue
		}
		return true
	}
	return false
}
