package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/trustplane/trustplane/cluster"
)

// raftPath is the operator endpoint with this node's own view of raft
// (trustplane chaos polls it on every node to count elections). Like the
// members endpoint it is outside the Kubernetes API, limited to
// system:masters, and never forwarded: each node answers for itself.
const raftPath = "/debug/trustplane/raft"

// RaftStatus is one node's own view of raft, as served at raftPath.
type RaftStatus struct {
	Node string `json:"node"`
	// State is Leader, Follower, Candidate or Shutdown.
	State string `json:"state"`
	Term  uint64 `json:"term"`
	// Leader is the leader's name as this node knows it; empty for none.
	Leader string `json:"leader"`
	// LeaderChanges counts the times this node came to know a leader
	// since it started (the first one included); Elections the times it
	// became a candidate. Compare two readings of one process.
	LeaderChanges uint64 `json:"leaderChanges"`
	Elections     uint64 `json:"elections"`
	CommitIndex   uint64 `json:"commitIndex"`
	AppliedIndex  uint64 `json:"appliedIndex"`
	// ReplicationLag is CommitIndex minus AppliedIndex: committed entries
	// this node has yet to apply.
	ReplicationLag uint64 `json:"replicationLag"`
	// Role is voter or replica (--role), as the node was started.
	Role string `json:"role"`
	// LastContact is how long ago this node heard from a leader ("0s" on
	// the leader); empty when it never has.
	LastContact ContactAge `json:"lastContact"`
	// Formats are the versions of each format the cluster writes, as
	// this node last found them: the newest every member reads, and the
	// members that hold one below what this build writes.
	Formats []cluster.ClusterFormat `json:"formats,omitempty"`
}

// ContactAge is how long ago a node heard from a leader. In JSON it is a
// Go duration string ("1.5s"), or "" for never (a negative age).
type ContactAge time.Duration

// MarshalJSON writes the duration string, or "" for never.
func (a ContactAge) MarshalJSON() ([]byte, error) {
	if a < 0 {
		return json.Marshal("")
	}
	return json.Marshal(time.Duration(a).String())
}

// UnmarshalJSON reads what MarshalJSON writes ("" is never: -1).
func (a *ContactAge) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*a = -1
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("lastContact %q: %w", s, err)
	}
	*a = ContactAge(d)
	return nil
}

// RaftReporter is an optional capability of Membership, found by type
// assertion: this node's raft view. A Membership without it answers 503
// at raftPath.
type RaftReporter interface {
	// RaftStatus is this node's own view, never the leader's: an operator
	// (or a checker) compares the nodes' answers, so each must speak for
	// itself. It must be cheap and must not block, because it is polled
	// while the cluster is under load or without a leader.
	RaftStatus() RaftStatus
}

func (s *Server) serveRaftStatus(w http.ResponseWriter, req *http.Request) {
	r, ok := s.cfg.Membership.(RaftReporter)
	if !ok {
		s.writeError(w, req, apierrors.NewServiceUnavailable("raft status is not available on this node"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(r.RaftStatus())
}
