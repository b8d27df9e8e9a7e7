package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
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
//     as a voter, unless an operator removed it (removed.go); a member
//     that left gracefully is removed; a member that failed stays a voter
//     until RemoveMember or the autopilot rule (Config.DeadServerTimeout).
//     A server that gossip reports at a new raft address is moved there
//     once the node there proves to be it (moveServer). A voter back with
//     another data directory is a non-voter until it has caught up, and
//     a caught-up non-voter becomes a voter (datadir.go).
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
	// bootstrapPoll is how often bootstrap-expect re-checks gossip.
	bootstrapPoll = 500 * time.Millisecond
	// reconcileInterval is how often the leader re-checks the membership,
	// repairing anything a missed event left behind.
	reconcileInterval = 2 * time.Second
	// hasStateTimeout bounds each HasState call of bootstrap-expect.
	hasStateTimeout = 2 * time.Second
	// leaveConfigWait bounds how long Leave waits to see its own removal
	// in its local configuration once the leader has committed it.
	leaveConfigWait = 2 * time.Second
)

// Member is one node of the cluster as Members reports it.
type Member struct {
	Name     string
	RaftAddr string
	APIAddr  string
	// Voter: the node is a voter in the raft configuration.
	Voter bool
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
}

// bootstrapLoop runs bootstrap-expect (see the rules above).
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	if n.cfg.BootstrapExpect <= 1 {
		return
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
// bootstrap (the first BootstrapExpect alive servers by name), a string
// identifying the whole view, and whether there are enough servers.
func (n *Node) bootstrapCandidates() ([]raft.Server, string, bool) {
	members := n.gossip.snapshot()
	var alive []nodeMeta
	for _, m := range members {
		if m.status != StatusAlive {
			continue
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
		dir, err := n.checkJoiner(name, raft.ServerAddress(m.meta.Raft), inConf, removed)
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
		err = n.raft.AddVoter(id, raft.ServerAddress(m.meta.Raft), 0, n.cfg.ApplyTimeout).Error()
		if err != nil {
			n.logger.Warn("adding voter failed; will retry", "member", name, "raft_addr", m.meta.Raft, "error", err)
			return
		}
		n.logger.Info("added voter", "member", name, "raft_addr", m.meta.Raft)
		inConf[id] = raft.Server{Suffrage: raft.Voter, ID: id, Address: raft.ServerAddress(m.meta.Raft)}
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
			if err := n.raft.RemoveServer(s.ID, 0, n.cfg.ApplyTimeout).Error(); err != nil {
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
		if err := n.raft.RemoveServer(id, 0, n.cfg.ApplyTimeout).Error(); err != nil {
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
// directory identity the node answered with (datadir.go).
func (n *Node) checkJoiner(name string, addr raft.ServerAddress, conf map[raft.ServerID]raft.Server, removed bool) (string, error) {
	if n.dialRPC == nil {
		if removed {
			return "", fmt.Errorf("not re-adding %q: an operator removed it, and without the internal RPC its data directory cannot be checked", name)
		}
		return "", nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, hasStateTimeout)
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState})
	if err != nil {
		return "", fmt.Errorf("not adding %q yet: cannot ask it for its raft state: %w", name, err)
	}
	if removed {
		return resp.Dir, n.readmitRemoved(name, resp)
	}
	if !resp.HasState || len(resp.Servers) == 0 || sharesServer(resp.Servers, conf, name) {
		return resp.Dir, nil
	}
	return "", fmt.Errorf("refusing to add %q: it has raft state of another cluster (its configuration %v shares no server with ours; did it bootstrap itself?). Wipe its data directory to join this cluster", name, resp.Servers)
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
	if err := fut.Error(); err != nil {
		return fmt.Errorf("moving server %q from %s to %s: %w", name, s.Address, addr, err)
	}
	n.logger.Info("membership: moved a server to its new raft address", "member", name, "from", s.Address, "to", addr, "suffrage", s.Suffrage.String())
	return nil
}

// voterHealth counts the voters in conf (except exclude) and how many of
// them are healthy: this node, and voters the leader's raft reaches that
// gossip does not report failed or left (without gossip, raft's view
// alone). Both views must agree a voter is alive before it counts toward a
// quorum that a removal would rely on.
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
		if members == nil {
			healthy++
			continue
		}
		if m, ok := members[string(id)]; ok && m.status == StatusAlive {
			healthy++
		}
	}
	return voters, healthy
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
		m.Voter = s.Suffrage == raft.Voter
	}
	if n.gossip != nil {
		for name, gm := range n.gossip.snapshot() {
			m := get(name)
			if m.RaftAddr == "" {
				m.RaftAddr = gm.meta.Raft
			}
			m.APIAddr = gm.meta.API
			m.Status = gm.status
		}
	}
	self := get(n.cfg.NodeName)
	self.RaftAddr = string(n.trans.LocalAddr())
	self.APIAddr = n.cfg.APIAddr
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
	m.LastContact = time.Duration(s.LastContactNS)
	if s.LastContactNS < 0 {
		m.LastContact = -1
	}
}
