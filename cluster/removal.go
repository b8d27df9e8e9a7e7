package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// leaveConfigWait bounds how long Leave waits to see its own removal
	// in its local configuration once the leader has committed it.
	leaveConfigWait = 2 * time.Second
	// livenessProbeTimeout bounds the internal RPC that asks a voter, just
	// before a removal, whether it is running.
	livenessProbeTimeout = time.Second
)

// voterHealth counts the voters in conf (except exclude) and how many of
// them are healthy: this node, and voters the leader's raft reaches that
// gossip does not report failed or left (without gossip, raft's view
// alone) and that answer the internal RPC now. All must agree a voter is
// alive before it counts toward a quorum that a removal would rely on.
//
// The views of raft and gossip lag a crash: for a moment after a peer is
// killed its heartbeats have not failed yet and gossip has not suspected
// it, and a leader that has just been elected (say, by Leave's leadership
// transfer) has no failures recorded at all. A removal that counts such a
// peer appends a configuration only it and the dead peer could commit;
// raft applies a configuration as soon as it is appended, so the cluster
// is wedged until the dead peer returns, and the node that asked to leave
// finds itself outside the configuration when it restarts. Asking each
// voter directly turns that window into a refusal.
func (n *Node) voterHealth(conf map[raft.ServerID]raft.Server, members map[string]member, exclude raft.ServerID) (voters, healthy int) {
	for id, s := range conf {
		if s.Suffrage != raft.Voter || id == exclude {
			continue
		}
		voters++
		if id == raft.ServerID(n.cfg.NodeName) {
			healthy++
			continue
		}
		if !n.raftReaches(id) {
			continue
		}
		if m, ok := members[string(id)]; members != nil && (!ok || m.status != StatusAlive) {
			continue
		}
		if n.answers(id, s.Address) {
			healthy++
		}
	}
	return voters, healthy
}

// answers reports whether the node at addr answers the internal RPC as id
// within livenessProbeTimeout. Without the internal RPC (a transport that
// has none) there is nothing to ask, and raft's and gossip's view stands.
func (n *Node) answers(id raft.ServerID, addr raft.ServerAddress) bool {
	if n.dialRPC == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(n.ctx, livenessProbeTimeout)
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState})
	return err == nil && resp.Name == string(id)
}

// removalKeepsQuorum refuses (ErrWouldLoseQuorum) to remove the voter id
// from conf when the alive voters left (voterHealth) would not be a
// majority of the remaining configuration. Removing a non-voter or a name
// not in conf is always allowed.
func (n *Node) removalKeepsQuorum(conf map[raft.ServerID]raft.Server, members map[string]member, id raft.ServerID) error {
	if s, ok := conf[id]; !ok || s.Suffrage != raft.Voter {
		return nil
	}
	voters, healthy := n.voterHealth(conf, members, id)
	if voters == 0 || healthy < voters/2+1 {
		return fmt.Errorf("%w: after removing %q, %d of %d voters would be alive", ErrWouldLoseQuorum, id, healthy, voters)
	}
	return nil
}

// latestConf is raft's latest configuration by server ID.
func (n *Node) latestConf() (map[raft.ServerID]raft.Server, error) {
	fut := n.raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		return nil, n.raftErr(err)
	}
	conf := map[raft.ServerID]raft.Server{}
	for _, s := range fut.Configuration().Servers {
		conf[s.ID] = s
	}
	return conf, nil
}

// removeServerAsLeader removes name from the configuration (leader only).
// It refuses (ErrWouldLoseQuorum) when the alive voters left would not be
// a majority of the remaining configuration; nothing overrides that. With
// durable set (an operator's removal, not a Leave) it first writes the
// removal marker (removed.go), so no later leader re-adds the node.
// Removing a name that is not a server but is known to gossip succeeds
// (only the marker is written); an unknown name is ErrUnknownMember.
func (n *Node) removeServerAsLeader(ctx context.Context, name string, durable bool) error {
	if n.raft.State() != raft.Leader {
		return n.raftErr(raft.ErrNotLeader)
	}
	conf, err := n.latestConf()
	if err != nil {
		return err
	}
	var members map[string]member
	if n.gossip != nil {
		members = n.gossip.snapshot()
	}
	id := raft.ServerID(name)
	if _, ok := conf[id]; !ok {
		if _, known := members[name]; !known {
			return fmt.Errorf("%w: %q", ErrUnknownMember, name)
		}
		if durable {
			return n.markRemoved(ctx, name)
		}
		return nil
	}
	if err := n.removalKeepsQuorum(conf, members, id); err != nil {
		return err
	}
	if durable {
		if err := n.markRemoved(ctx, name); err != nil {
			return err
		}
	}
	if n.gossip != nil {
		// Keep reconcile from adding it straight back while gossip still
		// shows it alive; a real rejoin (new incarnation) marks it alive.
		n.gossip.mu.Lock()
		if m, ok := n.gossip.members[name]; ok && m.status == StatusAlive {
			m.status, m.since = StatusLeft, time.Now()
		}
		n.gossip.mu.Unlock()
	}
	answered, err := waitFuture(ctx, n.raft.RemoveServer(id, 0, n.cfg.ApplyTimeout))
	if !answered {
		return n.ctxErr(ctx)
	}
	if err != nil {
		return n.raftErr(err)
	}
	n.logger.Info("removed server", "member", name, "durable", durable)
	return nil
}

// RemoveMember removes the voter name. It refuses with ErrWouldLoseQuorum
// when the alive voters left would not be a majority of the remaining
// configuration, and with ErrUnknownMember for a name neither raft nor
// gossip knows. The removal is durable: a replicated marker keeps every
// later leader from re-adding the node, even restarted with the same name,
// until it comes back with an empty data directory (removed.go).
//
// Only the leader removes another member: on a follower RemoveMember
// returns ErrNotLeader (the API forwards the operator's request to the
// leader instead), because the internal RPC lets a node remove only
// itself. A node removing itself goes through the leader from anywhere.
func (n *Node) RemoveMember(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrUnknownMember)
	}
	local := func(ctx context.Context) error { return n.removeServerAsLeader(ctx, name, true) }
	if name == n.cfg.NodeName {
		return n.viaLeader(ctx, local, rpcRequest{Op: opRemoveServer, Name: name, Durable: true})
	}
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	if err := n.awaitLeader(ctx, time.Now().Add(n.cfg.ApplyTimeout)); err != nil {
		return err
	}
	return local(ctx)
}

// viaLeader runs local on the leader, or sends req to the leader, waiting
// up to ApplyTimeout for one to be known and retrying once leadership
// moves.
func (n *Node) viaLeader(ctx context.Context, local func(context.Context) error, req rpcRequest) error {
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	for {
		err := n.awaitLeader(ctx, deadline)
		switch {
		case err == nil:
			err = local(ctx)
		case errors.Is(err, ErrNotLeader):
			addr, id := n.raft.LeaderWithID()
			if id == "" {
				continue
			}
			_, err = n.call(ctx, addr, req)
		default:
			return err
		}
		if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader)) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(remoteRetryDelay):
		case <-ctx.Done():
			return n.ctxErr(ctx)
		}
	}
}

// Leave departs gracefully, but never at the cost of the quorum. If
// removing this node keeps a majority of alive voters (removalKeepsQuorum
// on the leader) it transfers leadership away when it leads, has the
// leader remove it from the configuration, waits (bounded by ctx) until
// that is committed, then announces the departure on gossip and stops
// gossip. If the removal would cost the quorum it returns
// ErrWouldLoseQuorum and the node stays a voter: it stops gossip without
// a leave message, so peers count it failed and it rejoins as the same
// voter when restarted. The only voter of a cluster is never removed:
// Leave then only stops gossip. The node keeps running raft until
// Shutdown. Calling Leave again does nothing.
func (n *Node) Leave(ctx context.Context) error {
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	if !n.left.CompareAndSwap(false, true) {
		return nil
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	self := raft.ServerID(n.cfg.NodeName)

	inConf, others := false, 0
	if fut := n.raft.GetConfiguration(); fut.Error() == nil {
		for _, s := range fut.Configuration().Servers {
			if s.ID == self {
				inConf = true
			} else if s.Suffrage == raft.Voter {
				others++
			}
		}
	}
	var err error
	remove := inConf && others > 0
	if remove && n.raft.State() == raft.Leader {
		// Check before handing leadership away: a refused leave should
		// not cost an election.
		var members map[string]member
		if n.gossip != nil {
			members = n.gossip.snapshot()
		}
		if conf, cerr := n.latestConf(); cerr != nil {
			err = cerr
		} else {
			err = n.removalKeepsQuorum(conf, members, self)
		}
		if err == nil {
			n.logger.Info("leaving: transferring leadership")
			answered, terr := waitFuture(ctx, n.raft.LeadershipTransfer())
			if answered && terr != nil {
				n.logger.Warn("leaving: leadership transfer failed; removing this node as leader", "error", terr)
			}
		}
	}
	if remove && err == nil {
		err = n.viaLeader(ctx, func(ctx context.Context) error {
			return n.removeServerAsLeader(ctx, string(self), false)
		}, rpcRequest{Op: opRemoveServer, Name: string(self)})
	}
	removed := remove && err == nil
	switch {
	case removed:
		n.waitRemoved(ctx, self)
		n.logger.Info("left the cluster: removed from the raft configuration")
	case errors.Is(err, ErrWouldLoseQuorum):
		n.logger.Warn("leaving: this node stays a voter, because removing it would leave no quorum of alive voters; it will count as failed until it is restarted", "reason", err)
	case remove:
		n.logger.Error("leaving: could not be removed from the raft configuration; it stays a voter", "error", err)
	case inConf:
		n.logger.Info("leaving: this node is the only voter; it stays in the configuration")
	}
	if n.gossip != nil {
		if removed || !inConf {
			// Announce "leaving" in the metadata first: the leave message
			// itself does not tell peers a departure from a failure.
			n.leaving.Store(true)
			if uerr := n.gossip.ml.UpdateNode(gossipLeaveTimeout); uerr != nil {
				n.logger.Warn("leaving: metadata update not fully broadcast", "error", uerr)
			}
			if lerr := n.gossip.ml.Leave(gossipLeaveTimeout); lerr != nil {
				n.logger.Warn("leaving: gossip leave message not fully broadcast", "error", lerr)
			}
		}
		if serr := n.gossip.ml.Shutdown(); serr != nil {
			err = errors.Join(err, fmt.Errorf("cluster: gossip shutdown: %w", serr))
		}
	}
	return err
}

// waitRemoved waits briefly until id is no longer in this node's own view
// of the configuration (the leader has committed the removal already).
func (n *Node) waitRemoved(ctx context.Context, id raft.ServerID) {
	ctx, cancel := context.WithTimeout(ctx, leaveConfigWait)
	defer cancel()
	for {
		fut := n.raft.GetConfiguration()
		if fut.Error() == nil && !slices.ContainsFunc(fut.Configuration().Servers, func(s raft.Server) bool { return s.ID == id }) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
