package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/raft"
)

// Membership rules (Consul's, simplified):
//
//   - Bootstrap-expect: while raft has no state and BootstrapExpect > 1, a
//     node waits until gossip shows that many alive servers of its cluster
//     with the same expect value, and the same set on two consecutive
//     polls. If any of them reports raft state (HasState RPC) a cluster
//     exists: the node waits to be added. Otherwise the first
//     BootstrapExpect of them by name are the initial voters, and each of
//     those bootstraps that identical list. Every node computes the same
//     list from the same view, so nodes starting together form exactly
//     one cluster; raft refuses a second bootstrap once state exists.
//   - Only the leader changes the configuration (reconcile, every
//     reconcileInterval and on every gossip change, once its term barrier
//     has applied): an alive gossip member that is not a server is added
//     as a voter (a read replica, Config.Replica, as a non-voter), unless
//     an operator removed it (removed.go); a member
//     that left gracefully is removed; a member that failed stays a voter
//     until RemoveMember or the autopilot rule (Config.DeadServerTimeout).
//     A server that gossip reports at a new raft address is moved there
//     once the node there proves to be it (moveServer). A voter back with
//     another data directory is a non-voter until it has caught up, and
//     a caught-up non-voter becomes a voter (datadir.go); a replica never
//     does.
//   - A voter counts as alive for every quorum check when the leader's
//     raft reaches it (contact.go) and gossip does not report it failed or
//     left. No removal (RemoveMember, Leave, a left member, autopilot)
//     proceeds unless the alive voters left form a majority of the
//     remaining configuration; autopilot also needs them to be a majority
//     of the configuration that still includes the failed voter.
//   - Autopilot removes a voter only when gossip has reported it failed
//     for DeadServerTimeout and the leader's raft has lost contact with it
//     too: gossip silence alone never costs a vote.
//   - Leave asks the leader to remove this node under that quorum check.
//     If the check fails the node stays a voter and stops gossip without a
//     leave message, so peers see a failure, not a departure; it is never
//     forced out. Only after a successful removal does it announce the
//     departure on gossip.

const (
	// reconcileInterval is how often the leader re-checks the membership,
	// repairing anything a missed event left behind.
	reconcileInterval = 2 * time.Second
)

// reconcileLoop runs reconcile on the leader, periodically and on every
// gossip change.
func (n *Node) reconcileLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(reconcileInterval)
	defer tick.Stop()
	missing := map[raft.ServerID]time.Time{}
	catchup := map[raft.ServerID]uint64{}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.gossip.kick:
		case <-n.changed():
		}
		if n.left.Load() {
			return
		}
		if !n.readReady() {
			// Not the leader, or a new leader whose barrier has not
			// applied: its fsm may still lack removal markers.
			if n.raft.State() != raft.Leader {
				clear(missing)
				clear(catchup)
			}
			continue
		}
		n.reconcile(missing, catchup)
	}
}

// reconcile makes the raft configuration follow gossip (leader only).
// missing remembers since when a voter has been absent from gossip
// altogether, which the autopilot rule treats like failed; catchup is
// reconcileDataDirs' (datadir.go).
func (n *Node) reconcile(missing map[raft.ServerID]time.Time, catchup map[raft.ServerID]uint64) {
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return
	}
	servers := fut.Configuration().Servers
	members := n.gossip.snapshot()
	self := raft.ServerID(n.cfg.NodeName)
	inConf := map[raft.ServerID]raft.Server{}
	for _, s := range servers {
		inConf[s.ID] = s
	}

	// Alive members that are not servers become voters.
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := members[name]
		id := raft.ServerID(name)
		if m.status != StatusAlive || id == self {
			continue
		}
		if s, ok := inConf[id]; ok {
			if string(s.Address) != m.meta.Raft {
				if err := n.moveServer(s, raft.ServerAddress(m.meta.Raft), inConf); err != nil {
					n.logOnce(slog.LevelError, "membership: not moving a server to a new raft address", name, "", err)
					continue
				}
				s.Address = raft.ServerAddress(m.meta.Raft)
				inConf[id] = s
			}
			continue
		}
		removed := n.isRemoved(name)
		dir, replica, err := n.checkJoiner(name, raft.ServerAddress(m.meta.Raft), inConf, removed)
		if err != nil {
			level := slog.LevelError
			if removed {
				level = slog.LevelWarn
			}
			n.logOnce(level, "membership: not adding voter", name, "", err)
			continue
		}
		// Its data directory is recorded first, so that a record left
		// from an earlier member of this name does not get it demoted.
		if err := n.recordDataDir(name, dir); err != nil {
			n.logger.Warn("adding voter: recording its data directory failed; will retry", "member", name, "error", err)
			return
		}
		add, suffrage, what := n.raft.AddVoter, raft.Voter, "voter"
		if replica {
			add, suffrage, what = n.raft.AddNonvoter, raft.Nonvoter, "replica"
		}
		if err := n.awaitChange(add(id, raft.ServerAddress(m.meta.Raft), 0, n.cfg.ApplyTimeout)); err != nil {
			n.logger.Warn("adding "+what+" failed; will retry", "member", name, "raft_addr", m.meta.Raft, "error", err)
			return
		}
		n.logger.Info("added "+what, "member", name, "raft_addr", m.meta.Raft)
		inConf[id] = raft.Server{Suffrage: suffrage, ID: id, Address: raft.ServerAddress(m.meta.Raft)}
	}

	// Voters with a new (emptied) data directory vote only once caught up.
	n.reconcileDataDirs(inConf, members, catchup)

	// Members that left gracefully are removed.
	for _, s := range servers {
		if s.ID == self {
			continue
		}
		if m, ok := members[string(s.ID)]; ok && m.status == StatusLeft {
			if err := n.removalKeepsQuorum(inConf, members, s.ID); err != nil {
				n.logOnce(slog.LevelWarn, "membership: not removing a member that left", string(s.ID), "", err)
				continue
			}
			if err := n.awaitChange(n.raft.RemoveServer(s.ID, 0, n.cfg.ApplyTimeout)); err != nil {
				n.logger.Warn("removing a server that left failed; will retry", "member", s.ID, "error", err)
				return
			}
			n.logger.Info("removed server that left", "member", s.ID)
			delete(inConf, s.ID)
		}
	}

	// Autopilot: voters failed for longer than DeadServerTimeout.
	now := time.Now()
	for id := range missing {
		if _, ok := inConf[id]; !ok {
			delete(missing, id)
		}
	}
	var failed []raft.ServerID
	deadSince := map[raft.ServerID]time.Time{}
	for id, s := range inConf {
		if id == self || s.Suffrage != raft.Voter {
			continue
		}
		m, ok := members[string(id)]
		switch {
		case !ok:
			if _, seen := missing[id]; !seen {
				missing[id] = now
			}
			deadSince[id] = missing[id]
			failed = append(failed, id)
		case m.status == StatusFailed:
			delete(missing, id)
			deadSince[id] = m.since
			failed = append(failed, id)
		default:
			delete(missing, id)
		}
	}
	if n.cfg.DeadServerTimeout < 0 || len(failed) == 0 {
		return
	}
	slices.Sort(failed)
	for _, id := range failed {
		if now.Sub(deadSince[id]) < n.cfg.DeadServerTimeout {
			continue
		}
		if n.raftReaches(id) {
			n.logOnce(slog.LevelWarn, "autopilot: not removing a voter raft still reaches", string(id), "", fmt.Errorf("gossip has reported voter %q failed for %s, but the leader's raft still reaches it (a gossip-only fault?); it stays a voter", id, now.Sub(deadSince[id]).Round(time.Second)))
			continue
		}
		if err := n.removalKeepsQuorum(inConf, members, id); err != nil {
			n.logOnce(slog.LevelWarn, "autopilot: not removing failed voter", string(id), "", err)
			continue
		}
		voters, healthy := n.voterHealth(inConf, members, "")
		if healthy < voters/2+1 {
			n.logOnce(slog.LevelWarn, "autopilot: not removing failed voter", string(id), "", fmt.Errorf("voter %q has failed for %s but removing it is unsafe: %d of %d voters are alive", id, now.Sub(deadSince[id]).Round(time.Second), healthy, voters))
			continue
		}
		if err := n.awaitChange(n.raft.RemoveServer(id, 0, n.cfg.ApplyTimeout)); err != nil {
			n.logger.Warn("autopilot: removing a failed voter failed; will retry", "member", id, "error", err)
			return
		}
		n.logger.Info("autopilot: removed a voter that had failed", "member", id, "failed_for", now.Sub(deadSince[id]).Round(time.Millisecond), "dead_server_timeout", n.cfg.DeadServerTimeout)
		delete(inConf, id)
		delete(missing, id)
	}
}

// checkJoiner refuses to add a node that has raft state of another
// cluster: one whose configuration shares no server with ours (say, one
// that bootstrapped itself alone). Adding it could let its log, if its
// term is higher, win an election and overwrite committed entries. A
// former member that restarts still lists our servers and is accepted.
// A node that cannot be asked is not added this round. A node an operator
// removed (removed set) is added only if it has no raft state, and its
// removal marker is cleared first (readmitRemoved). It returns the data
// directory identity the node answered with (datadir.go), and whether it
// is a read replica, to be added as a non-voter.
func (n *Node) checkJoiner(name string, addr raft.ServerAddress, conf map[raft.ServerID]raft.Server, removed bool) (dir string, replica bool, err error) {
	if n.dialRPC == nil {
		if removed {
			return "", false, fmt.Errorf("not re-adding %q: an operator removed it, and without the internal RPC its data directory cannot be checked", name)
		}
		return "", false, nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, hasStateTimeout)
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState})
	if err != nil {
		return "", false, fmt.Errorf("not adding %q yet: cannot ask it for its raft state: %w", name, err)
	}
	if removed {
		return resp.Dir, resp.Replica, n.readmitRemoved(name, resp)
	}
	if !resp.HasState || len(resp.Servers) == 0 || sharesServer(resp.Servers, conf, name) {
		return resp.Dir, resp.Replica, nil
	}
	return "", false, fmt.Errorf("refusing to add %q: it has raft state of another cluster (its configuration %v shares no server with ours; did it bootstrap itself?). Wipe its data directory to join this cluster", name, resp.Servers)
}

// sharesServer reports whether servers (a node's configuration, by ID)
// lists a server of conf other than name itself: the node's raft state is
// of this cluster.
func sharesServer(servers []string, conf map[raft.ServerID]raft.Server, name string) bool {
	for _, s := range servers {
		if _, ok := conf[raft.ServerID(s)]; ok && s != name {
			return true
		}
	}
	return false
}

// moveServer changes the raft address of server s to addr, where gossip
// now reports it (a node restarted with another --raft-addr), keeping its
// suffrage. Raft's AddVoter (AddNonvoter) of a known ID does exactly that.
// It is done only when the node at addr proves to be s: it answers, over
// the internal RPC's mutual TLS, with s's name and raft state of this
// cluster (its configuration shares a server with ours), and with the
// data directory recorded for s (datadir.go) when one is; and the
// leader's raft no longer reaches s at its old address, so no second
// process holds the name there. A node without raft state at a new
// address proves nothing (any node could claim the name): the operator
// removes the member, and it joins as a new server. Otherwise it says
// why not.
func (n *Node) moveServer(s raft.Server, addr raft.ServerAddress, conf map[raft.ServerID]raft.Server) error {
	name := string(s.ID)
	if n.raftReaches(s.ID) {
		return fmt.Errorf("server %q is in the raft configuration at %s, which raft still reaches, and gossip advertises %s; not moving it while the old address answers (two processes with one name?)", name, s.Address, addr)
	}
	if n.dialRPC == nil {
		return fmt.Errorf("server %q is in the raft configuration at %s and gossip advertises %s; without the internal RPC the node there cannot prove it is %q", name, s.Address, addr, name)
	}
	ctx, cancel := context.WithTimeout(n.ctx, hasStateTimeout)
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState})
	if err != nil {
		return fmt.Errorf("not moving server %q from %s to %s yet: cannot ask it for its raft state: %w", name, s.Address, addr, err)
	}
	switch {
	case resp.Name != name:
		return fmt.Errorf("not moving server %q from %s to %s: the node there answers as %q", name, s.Address, addr, resp.Name)
	case !resp.HasState:
		return fmt.Errorf("not moving server %q from %s to %s: the node there has no raft state, so it cannot prove it is the member it names; remove the member (trustplane members remove %s) and it joins as a new server", name, s.Address, addr, name)
	case !sharesServer(resp.Servers, conf, name):
		return fmt.Errorf("not moving server %q from %s to %s: the node there has raft state of another cluster (its configuration %v shares no server with ours)", name, s.Address, addr, resp.Servers)
	}
	if rec := n.recordedDataDir(name); rec != "" && resp.Dir != rec {
		return fmt.Errorf("not moving server %q from %s to %s: the node there has raft state of this cluster but not the data directory recorded for %q (a copy of another node's?); remove the member (trustplane members remove %s) first", name, s.Address, addr, name, name)
	}
	fut := n.raft.AddVoter(s.ID, addr, 0, n.cfg.ApplyTimeout)
	if s.Suffrage != raft.Voter {
		fut = n.raft.AddNonvoter(s.ID, addr, 0, n.cfg.ApplyTimeout)
	}
	if err := n.awaitChange(fut); err != nil {
		return fmt.Errorf("moving server %q from %s to %s: %w", name, s.Address, addr, err)
	}
	n.logger.Info("membership: moved a server to its new raft address", "member", name, "from", s.Address, "to", addr, "suffrage", s.Suffrage.String())
	return nil
}
