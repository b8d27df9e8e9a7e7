package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Whether this node is in the cluster's configuration. A node outside it
// applies nothing new, so its local reads (resourceVersion=0) and watches
// would go stale without bound; the API refuses them and /readyz fails
// (CheckMember).
//
// Raft v1.7.3 exposes only a node's latest configuration, not the
// committed one, and a node removed while it was down or cut off never
// learns of it: on restart its log still lists it, and the leader no
// longer replicates to it. So a node counts as a member when its latest
// configuration lists it and, unless it leads, the leader does not
// contradict it. A follower that has heard from a leader within
// memberContactFresh is in that leader's configuration (a leader only
// replicates to its servers). One that has not asks the nodes it knows
// (configuration and gossip) over the internal RPC; the leader's answer
// decides. The loop runs only with gossip (a multi-node cluster).

const (
	// memberCheckInterval is how often a follower without recent leader
	// contact asks the leader whether it is still listed.
	memberCheckInterval = 2 * time.Second
	// memberContactFresh: leader contact this recent proves membership.
	memberContactFresh = 3 * time.Second
)

// InConfiguration reports whether this node is in the cluster's
// configuration as far as it can tell (see CheckMember).
func (n *Node) InConfiguration() bool { return n.CheckMember() == nil }

// CheckMember is the /readyz check that this node is in the cluster's
// configuration: its latest configuration lists it, and no leader has
// answered with a configuration that does not. It fails with ErrNotMember
// (ErrShutdown after Shutdown).
func (n *Node) CheckMember() error {
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	conf, err := n.latestConf()
	if err != nil {
		return err
	}
	if _, ok := conf[raft.ServerID(n.cfg.NodeName)]; !ok {
		if len(conf) == 0 {
			return fmt.Errorf("%w: it has no configuration yet (waiting to be added)", ErrNotMember)
		}
		return fmt.Errorf("%w: it was removed, or has not been added yet", ErrNotMember)
	}
	if n.excluded.Load() && n.raft.State() != raft.Leader {
		return fmt.Errorf("%w: the leader's configuration does not list it (removed while it was away?)", ErrNotMember)
	}
	return nil
}

// memberCheckLoop keeps n.excluded current (see the comment above).
func (n *Node) memberCheckLoop() {
	defer n.wg.Done()
	if n.dialRPC == nil {
		return
	}
	tick := time.NewTicker(memberCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if n.raft.State() == raft.Leader {
			n.excluded.Store(false)
			continue
		}
		if lc := n.raft.LastContact(); !lc.IsZero() && time.Since(lc) < memberContactFresh {
			n.excluded.Store(false)
			continue
		}
		if listed, ok := n.askLeaderConf(); ok {
			if was := n.excluded.Swap(!listed); !was && !listed && n.listsSelf() {
				n.logger.Warn("membership: the leader's configuration does not list this node (removed while it was away?); it serves no resourceVersion=0 reads or watches and is not ready")
			}
		}
	}
}

// listsSelf reports whether this node's latest configuration lists it.
func (n *Node) listsSelf() bool {
	conf, err := n.latestConf()
	if err != nil {
		return false
	}
	_, ok := conf[raft.ServerID(n.cfg.NodeName)]
	return ok
}

// askLeaderConf asks the nodes this one knows of for their configuration
// until one that leads answers; it reports whether the leader lists this
// node. ok is false when no leader answered.
func (n *Node) askLeaderConf() (listed, ok bool) {
	addrs := map[raft.ServerAddress]bool{}
	if conf, err := n.latestConf(); err == nil {
		for id, s := range conf {
			if id != raft.ServerID(n.cfg.NodeName) {
				addrs[s.Address] = true
			}
		}
	}
	if n.gossip != nil {
		for name, m := range n.gossip.snapshot() {
			if name != n.cfg.NodeName && m.status == StatusAlive {
				addrs[raft.ServerAddress(m.meta.Raft)] = true
			}
		}
	}
	for addr := range addrs {
		ctx, cancel := context.WithTimeout(n.ctx, statsTimeout)
		resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState})
		cancel()
		if err != nil || !resp.Leader {
			continue
		}
		return slices.Contains(resp.Servers, n.cfg.NodeName), true
	}
	return false, false
}
