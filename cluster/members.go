package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Member is one node of the cluster as Members reports it.
type Member struct {
	Name     string
	RaftAddr string
	APIAddr  string
	// Configured: the node is in the raft configuration, as a voter or
	// not; a node only gossip knows of is not (yet).
	Configured bool
	// Voter: the node is a voter in the raft configuration.
	Voter bool
	// Replica: the node is a read replica (Config.Replica), as it told
	// gossip; a non-voter that is not one is a voter catching up.
	Replica bool
	// Status is the gossip status: StatusAlive, StatusFailed, StatusLeft,
	// or StatusUnknown for a raft server gossip has not reported.
	Status string
	// RaftState is the node's own raft state (Leader, Follower, Candidate,
	// Shutdown), or "unknown" when it did not answer.
	RaftState string
	// LastContact is how long ago the node last heard from its leader (0
	// for the leader itself), or -1 if unknown.
	LastContact time.Duration
	// AppliedIndex is the node's FSM applied index (0 if unknown).
	AppliedIndex uint64
	// Features are what the node's build can do that older builds cannot
	// (Config.Features), as it reported them; nil from a build that
	// reports none, or when it did not answer.
	Features []string
	// Facts are what the node reported about itself (Config.Facts).
	Facts map[string]string
	// Version is the release the node reported (Config.Version); "" from
	// a build that reports none, or when it did not answer.
	Version string
	// Formats are the versions of each format the node's build reads
	// (Config.Formats), as it reported them; nil from a build that
	// reports none (it reads version 1 of each), or when it did not
	// answer.
	Formats map[string]Reads
}

// LeaderAPIAddr returns the leader's advertised API address (from gossip
// metadata, or this node's own when it leads), for forwarding writes. It
// fails with ErrNoLeader when no leader, or no address for it, is known.
func (n *Node) LeaderAPIAddr() (string, error) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", ErrNoLeader
	}
	if id == raft.ServerID(n.cfg.NodeName) {
		if n.cfg.APIAddr == "" {
			return "", fmt.Errorf("%w: this node leads but has no APIAddr", ErrNoLeader)
		}
		return n.cfg.APIAddr, nil
	}
	if n.gossip != nil {
		n.gossip.mu.Lock()
		m, ok := n.gossip.members[string(id)]
		var api string
		if ok {
			api = m.meta.API
		}
		n.gossip.mu.Unlock()
		if api != "" {
			return api, nil
		}
	}
	return "", fmt.Errorf("%w: the API address of leader %s is not known", ErrNoLeader, id)
}

// Members lists the union of the raft configuration and the gossip
// members, sorted by name, with each node's raft state, last contact and
// applied index fetched over the internal RPC (statsTimeout each, in
// parallel, bounded by ctx). Nodes that do not answer show RaftState
// "unknown" and LastContact -1.
func (n *Node) Members(ctx context.Context) ([]Member, error) {
	if n.ctx.Err() != nil {
		return nil, ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	fut := n.raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		return nil, n.raftErr(err)
	}
	byName := map[string]*Member{}
	get := func(name string) *Member {
		m, ok := byName[name]
		if !ok {
			m = &Member{Name: name, Status: StatusUnknown, RaftState: "unknown", LastContact: -1}
			byName[name] = m
		}
		return m
	}
	for _, s := range fut.Configuration().Servers {
		m := get(string(s.ID))
		m.RaftAddr = string(s.Address)
		m.Configured = true
		m.Voter = s.Suffrage == raft.Voter
	}
	if n.gossip != nil {
		for name, gm := range n.gossip.snapshot() {
			m := get(name)
			if m.RaftAddr == "" {
				m.RaftAddr = gm.meta.Raft
			}
			m.APIAddr = gm.meta.API
			m.Replica = gm.meta.Replica
			m.Status = gm.status
		}
	}
	self := get(n.cfg.NodeName)
	self.RaftAddr = string(n.trans.LocalAddr())
	self.APIAddr = n.cfg.APIAddr
	self.Replica = n.cfg.Replica
	if n.left.Load() {
		self.Status = StatusLeft
	} else {
		self.Status = StatusAlive
	}

	var wg sync.WaitGroup
	for name, m := range byName {
		if name == n.cfg.NodeName {
			fillStats(m, n.localStats())
			continue
		}
		if m.RaftAddr == "" || m.Status == StatusLeft || n.dialRPC == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, statsTimeout)
			defer cancel()
			resp, err := n.call(cctx, raft.ServerAddress(m.RaftAddr), rpcRequest{Op: opStats})
			if err == nil && resp.Stats != nil {
				fillStats(m, *resp.Stats)
			}
		}()
	}
	wg.Wait()
	out := make([]Member, 0, len(byName))
	for _, m := range byName {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func fillStats(m *Member, s nodeStats) {
	m.RaftState = s.State
	m.AppliedIndex = s.Applied
	m.Features, m.Facts, m.Version = s.Features, s.Facts, reportedVersion(s.Version)
	m.Formats = advertised(s.Formats)
	m.LastContact = time.Duration(s.LastContactNS)
	if s.LastContactNS < 0 {
		m.LastContact = -1
	}
}

// Reconnect closes this node's pooled connections to its peers, raft's and
// the internal RPC's, so that the next ones are made with the certificate
// and the trust of the moment, and closes every connection, accepted or
// dialled, whose peer the trust of the moment no longer accepts: after a
// node CA rotation step, no connection goes on under a certificate of a
// CA that left the trust. Raft dials again at once; nothing acknowledged
// is lost (raft retries, an RPC cut off fails and is retried by its
// caller).
func (n *Node) Reconnect() {
	if t, ok := n.trans.(interface{ CloseStreams() }); ok {
		t.CloseStreams()
	}
	n.rpcPool.drain()
	if n.recheck != nil {
		if closed := n.recheck(); closed > 0 {
			n.cfg.Logger.Info("closed connections whose peer is no longer trusted", "connections", closed)
		}
	}
}

// maxVersionLen bounds a reported release: a semantic version with its
// build metadata fits many times over.
const maxVersionLen = 64

// reportedVersion is the release a peer reported, as members shows it: a
// semantic version's characters only, at most maxVersionLen of them, or
// "invalid". A peer is authenticated by its node certificate, but what it
// says about its build is only displayed, and must not carry an operator's
// terminal control characters or a page of text into members' table.
func reportedVersion(v string) string {
	if len(v) > maxVersionLen {
		return "invalid"
	}
	for _, c := range v {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-' || c == '+') {
			return "invalid"
		}
	}
	return v
}
