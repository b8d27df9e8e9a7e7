package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// bootstrapPoll is how often bootstrap-expect re-checks gossip.
	bootstrapPoll = 500 * time.Millisecond
	// hasStateTimeout bounds each HasState call of bootstrap-expect.
	hasStateTimeout = 2 * time.Second
)

// bootstrapLoop runs bootstrap-expect (see the membership rules in
// membership.go).
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	if n.cfg.BootstrapExpect <= 1 || n.cfg.Replica {
		return // a replica is only ever added by a leader
	}
	tick := time.NewTicker(bootstrapPoll)
	defer tick.Stop()
	var lastView string
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if n.left.Load() || n.hasState() {
			return
		}
		chosen, view, ok := n.bootstrapCandidates()
		if !ok {
			lastView = ""
			continue
		}
		if view != lastView {
			lastView = view // wait for the same view twice
			continue
		}
		if !slices.ContainsFunc(chosen, func(s raft.Server) bool { return s.ID == raft.ServerID(n.cfg.NodeName) }) {
			n.logger.Info("bootstrap-expect: enough servers seen; this node is not among the initial voters and waits to be added", "initial", serverIDs(chosen))
			return
		}
		existing, err := n.peersWithState(chosen)
		if err != nil {
			n.logger.Info("bootstrap-expect: cannot ask every peer for its raft state yet; retrying", "error", err)
			lastView = ""
			continue
		}
		if existing != "" {
			n.logger.Info("bootstrap-expect: a peer already has raft state; not bootstrapping, waiting to be added by the leader", "peer", existing)
			return
		}
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: chosen}).Error(); err != nil {
			if errors.Is(err, raft.ErrCantBootstrap) {
				return
			}
			n.logger.Error("bootstrap-expect: bootstrap failed", "error", err)
			continue
		}
		n.logger.Info("bootstrap-expect: bootstrapped the cluster", "servers", serverIDs(chosen))
		return
	}
}

// bootstrapCandidates returns the initial configuration this node would
// bootstrap (the first BootstrapExpect alive servers by name, replicas
// left out), a string
// identifying the whole view, and whether there are enough servers.
func (n *Node) bootstrapCandidates() ([]raft.Server, string, bool) {
	members := n.gossip.snapshot()
	var alive []nodeMeta
	for _, m := range members {
		if m.status != StatusAlive || m.meta.Replica {
			continue // replicas are never initial voters
		}
		if m.meta.Expect != n.cfg.BootstrapExpect {
			n.logOnce(slog.LevelWarn, "bootstrap-expect: waiting", m.meta.Name, "", fmt.Errorf("member %q was started with bootstrap-expect %d, this node with %d; not bootstrapping until they agree", m.meta.Name, m.meta.Expect, n.cfg.BootstrapExpect))
			return nil, "", false
		}
		alive = append(alive, m.meta)
	}
	if len(alive) < n.cfg.BootstrapExpect {
		return nil, "", false
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].Name < alive[j].Name })
	var view []string
	for _, m := range alive {
		view = append(view, m.Name+"="+m.Raft)
	}
	if len(alive) > n.cfg.BootstrapExpect {
		n.logOnce(slog.LevelWarn, "bootstrap-expect: more servers than expected", n.cfg.NodeName, "", fmt.Errorf("%d servers seen, more than the expected %d; the first %d by name become the initial voters", len(alive), n.cfg.BootstrapExpect, n.cfg.BootstrapExpect))
	}
	var servers []raft.Server
	for _, m := range alive[:n.cfg.BootstrapExpect] {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.Name), Address: raft.ServerAddress(m.Raft)})
	}
	return servers, strings.Join(view, ","), true
}

// peersWithState asks every other server in servers whether it has raft
// state, returning the name of one that has, or an error if any could
// not be asked.
func (n *Node) peersWithState(servers []raft.Server) (string, error) {
	for _, s := range servers {
		if s.ID == raft.ServerID(n.cfg.NodeName) {
			continue
		}
		ctx, cancel := context.WithTimeout(n.ctx, hasStateTimeout)
		resp, err := n.call(ctx, s.Address, rpcRequest{Op: opHasState})
		cancel()
		if err != nil {
			return "", fmt.Errorf("ask %s: %w", s.ID, err)
		}
		if resp.HasState {
			return string(s.ID), nil
		}
	}
	return "", nil
}

func serverIDs(servers []raft.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = string(s.ID)
	}
	return out
}
