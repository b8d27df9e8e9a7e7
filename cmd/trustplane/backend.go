package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
)

// membership adapts the cluster's member view to the API's.
type membership struct {
	node *cluster.Node
	// clusterID is the cluster's id (clusterIDAtStart), recorded in
	// snapshots (snapshot.go).
	clusterID string
}

// appliedIndexes are the members' applied indexes by name, for a rotation
// step that waits until every member has applied a key (api/authn). A
// member is every node of the raft configuration, voter or read replica:
// a replica verifies tokens and speaks Raft and gossip as a voter does, so
// it must trust a new root before the root is used. A member that does
// not answer counts as having applied nothing.
func (m membership) appliedIndexes(ctx context.Context) (map[string]uint64, error) {
	ms, err := m.node.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, c := range ms {
		if c.Configured {
			out[c.Name] = c.AppliedIndex
		}
	}
	return out, nil
}

// lacking returns the members (voters and replicas, as appliedIndexes
// counts them) that do not report feature: an older build, or a member
// that did not answer, named so.
func (m membership) lacking(feature string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		ms, err := m.node.Members(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, c := range ms {
			switch {
			case !c.Configured || slices.Contains(c.Features, feature):
			case c.RaftState == "unknown":
				out = append(out, c.Name+" (did not answer)")
			default:
				out = append(out, c.Name)
			}
		}
		return out, nil
	}
}

// facts returns every member's fact key ("" when it did not report it).
func (m membership) facts(key string) func(ctx context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		ms, err := m.node.Members(ctx)
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, c := range ms {
			if c.Configured {
				out[c.Name] = c.Facts[key]
			}
		}
		return out, nil
	}
}

func (m membership) Members(ctx context.Context) ([]api.Member, error) {
	ms, err := m.node.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Member, len(ms))
	for i, c := range ms {
		out[i] = api.Member{
			Name: c.Name, RaftAddr: c.RaftAddr, APIAddr: c.APIAddr, Voter: c.Voter, Replica: c.Replica, Status: c.Status,
			RaftState: c.RaftState, LastContact: c.LastContact, AppliedIndex: c.AppliedIndex, Version: c.Version, Formats: c.Formats,
		}
	}
	return out, nil
}

// caughtUp is the /readyz check fsm-caught-up: the local state is not far
// behind the log (cluster.Node.CheckCaughtUp), and it holds what the
// cluster had acknowledged --max-stale-read ago (api.LocalStateFresh).
// The second part is what keeps a restarted node unready while it
// replays its log: raft's commit index there is 0 until the leader's
// first append, so the first part alone passes.
func caughtUp(node *cluster.Node, maxStale time.Duration) error {
	if err := node.CheckCaughtUp(); err != nil {
		return err
	}
	if !api.LocalStateFresh(membership{node: node}, maxStale) {
		return fmt.Errorf("%w: it has not applied what the leader had applied %v ago (--max-stale-read)", cluster.ErrBehind, maxStale)
	}
	return nil
}

// LeaderContactWithin is api.LeaderContact: the API bounds how stale its
// local reads may be (--max-stale-read).
func (m membership) LeaderContactWithin(d time.Duration) bool { return m.node.LeaderContactWithin(d) }

func (m membership) RemoveMember(ctx context.Context, name string) error {
	return m.node.RemoveMember(ctx, name)
}

// InConfiguration is api.ConfigurationMember: the API refuses
// resourceVersion=0 reads and watches while it is false.
func (m membership) InConfiguration() bool { return m.node.InConfiguration() }

// RaftStatus is api.RaftReporter (GET /debug/trustplane/raft).
func (m membership) RaftStatus() api.RaftStatus {
	s := m.node.Status()
	return api.RaftStatus{
		Node: s.Node, State: s.State, Term: s.Term, Leader: s.Leader,
		LeaderChanges: s.LeaderChanges, Elections: s.Elections,
		CommitIndex: s.CommitIndex, AppliedIndex: s.AppliedIndex, LastContact: api.ContactAge(s.LastContact),
		ReplicationLag: s.ReplicationLag(), Role: roleOf(s.Replica), Formats: s.Formats,
	}
}

// roleOf is a node's --role.
func roleOf(replica bool) string {
	if replica {
		return "replica"
	}
	return "voter"
}

// backend joins the node (writes, read index) and the fsm (local reads) into
// what the storage layer needs (storage.Backend).
type backend struct {
	node *cluster.Node
	fsm  *fsm.FSM
	// submit: writes are proposed from any node (cluster.Node.Submit);
	// otherwise only the leader proposes, and other nodes get
	// cluster.ErrNotLeader.
	submit bool
}

func (b backend) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	propose := b.node.Propose
	if b.submit {
		propose = b.node.Submit
	}
	res, err := propose(ctx, cmd)
	if errors.Is(err, cluster.ErrTimeout) || errors.Is(err, cluster.ErrLeadershipLost) || errors.Is(err, cluster.ErrShutdown) {
		// The entry may have been handed to raft: its outcome is unknown.
		err = fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, err)
	}
	return res, err
}
func (b backend) ReadIndex(ctx context.Context) (uint64, error) { return b.node.ReadIndex(ctx) }

// catchUp waits, within 5 s, until this node has applied everything the
// leader had committed when it was called (authn.KeyStore.SetCatchUp,
// api.Config.CatchUp).
func (b backend) catchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	index, err := b.node.ReadIndex(ctx)
	if err != nil {
		return err
	}
	return b.fsm.WaitApplied(ctx, index)
}
func (b backend) AppliedIndex() uint64 { return b.fsm.AppliedIndex() }
func (b backend) WaitApplied(ctx context.Context, index uint64) error {
	return b.fsm.WaitApplied(ctx, index)
}
func (b backend) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) { return b.fsm.Get(key, rev) }
func (b backend) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return b.fsm.List(p, opts)
}
