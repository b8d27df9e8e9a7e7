package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/internal/connlimit"
)

// Discovery is hashicorp/memberlist: encrypted SWIM gossip on GossipAddr.
// Every node advertises a nodeMeta (name, raft and API addresses, cluster
// identity, bootstrap-expect value). The gossip layer only informs: raft's
// configuration stays the authority on who votes, and only the leader
// changes it (membership.go).

const (
	// metaVersion is the nodeMeta format. A node refuses peers whose meta
	// it cannot read (another major format), rather than guess.
	metaVersion = 1

	// gossipLeaveTimeout bounds how long Leave waits for the leave message
	// to be broadcast.
	gossipLeaveTimeout = 2 * time.Second

	// joinRetryMin and joinRetryMax space the attempts to join the seeds.
	joinRetryMin = 500 * time.Millisecond
	joinRetryMax = 10 * time.Second

	// gossipDeadNodeReclaim is memberlist's DeadNodeReclaimTime: how long
	// a member must have been dead before its name is accepted from
	// another gossip address. memberlist's default, 0, never accepts it,
	// so a node restarted at a new address (a pod with a new IP) stays
	// refused ("conflicting address") until memberlist forgets the dead
	// entry, GossipToTheDeadTime (30s) after its death, and the restarted
	// node's next push/pull after that.
	//
	// The default guards against two live processes claiming one name:
	// the one known first keeps it. A reclaim time only lets a name move
	// once its old holder has failed every probe (direct and indirect) and
	// its suspicion timeout for this long, which gives a live but
	// unreachable holder time to refute first; memberlist's forgetting
	// lets any address take the name at GossipToTheDeadTime anyway, so
	// this shortens an existing window and opens no new one. Nor does the
	// gossip name grant anything in raft: a node name is admitted only
	// with the raft address the configuration has for it (admit), raft
	// dials that address and its mutual TLS requires a node-CA
	// certificate valid for that host, and a node whose name is held by
	// another process is told so (NotifyConflict). Consul uses 30s, equal
	// to GossipToTheDeadTime; ours is shorter so that a restarted pod is
	// back in everyone's view within seconds of its old entry's death
	// (the refusing members retry its new address then: retryReclaim).
	gossipDeadNodeReclaim = 10 * time.Second

	// refusalLogEvery rate-limits the log line for a refused peer, which
	// gossip would otherwise repeat for every alive message.
	refusalLogEvery = 30 * time.Second
)

// Member statuses, as gossip reports them.
const (
	StatusAlive  = "alive"
	StatusFailed = "failed"
	StatusLeft   = "left"
	// StatusUnknown: a raft server that gossip has not reported (gossip is
	// disabled, or the node has not been heard of since this node started).
	StatusUnknown = "unknown"
)

// nodeMeta is what a node tells its gossip peers about itself. It must
// stay below memberlist.MetaMaxSize (512 bytes); Config.Validate checks.
type nodeMeta struct {
	V       int    `json:"v"`
	Name    string `json:"n"`
	Raft    string `json:"r"`
	API     string `json:"a,omitempty"`
	Cluster string `json:"c"`
	Expect  int    `json:"e,omitempty"`
	// Replica: the node is a read replica (Config.Replica); bootstrap
	// never counts it among the initial voters.
	Replica bool `json:"rep,omitempty"`
	// Leaving is set by Leave just before the gossip leave message.
	// memberlist's leave notification does not say whether a node left or
	// failed, so this is how peers tell the two apart.
	Leaving bool `json:"l,omitempty"`
}

func (m nodeMeta) encode() []byte {
	b, _ := json.Marshal(m) // cannot fail: strings and ints only
	return b
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) == 0 {
		return m, errors.New("no metadata (not a trustplane node?)")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("unreadable metadata: %v", err)
	}
	if m.V != metaVersion {
		return m, fmt.Errorf("metadata version %d, want %d", m.V, metaVersion)
	}
	if m.Name == "" || m.Raft == "" {
		return m, errors.New("metadata lacks the node name or raft address")
	}
	return m, nil
}

// member is what this node knows about one gossip peer. The table keeps
// failed and left peers after memberlist forgets them, because the raft
// configuration may still list them.
type member struct {
	meta   nodeMeta
	status string    // StatusAlive, StatusFailed or StatusLeft
	since  time.Time // when status last changed
}

// gossip is the node's memberlist and its view of the peers.
type gossip struct {
	ml *memberlist.Memberlist
	// keyring is memberlist's: the key gossip encrypts with (primary) and
	// those it decrypts with (SetGossipKeys).
	keyring *memberlist.Keyring
	addr    string // advertised gossip address, set once at start
	// conns is the gossip port's table of inbound streams
	// (gossiptransport.go); nil when a test supplies its own transport.
	conns *connlimit.Limiter

	mu      sync.Mutex
	members map[string]*member
	refused map[string]time.Time // name+reason -> last logged
	// reclaiming holds the names with a retryReclaim pending.
	reclaiming map[string]bool

	// kick is signalled on every membership change; the bootstrap and
	// reconcile loops wake on it.
	kick chan struct{}
}

func (g *gossip) notify() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// snapshot copies the member table.
func (g *gossip) snapshot() map[string]member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]member, len(g.members))
	for k, v := range g.members {
		out[k] = *v
	}
	return out
}

func (g *gossip) set(name string, meta *nodeMeta, status string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.members[name]
	if !ok {
		m = &member{}
		g.members[name] = m
	}
	if meta != nil {
		m.meta = *meta
	}
	if m.status != status {
		m.status = status
		m.since = time.Now()
	}
}

// localMeta is this node's gossip metadata.
func (n *Node) localMeta() nodeMeta {
	return nodeMeta{
		V:       metaVersion,
		Name:    n.cfg.NodeName,
		Raft:    string(n.trans.LocalAddr()),
		API:     n.cfg.APIAddr,
		Cluster: n.cfg.ClusterID,
		Expect:  n.cfg.BootstrapExpect,
		Replica: n.cfg.Replica,
		Leaving: n.leaving.Load(),
	}
}

// startGossip creates the memberlist and starts joining the seeds.
func (n *Node) startGossip(tune func(*memberlist.Config)) error {
	host, portStr, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("%w: GossipAddr: %v", ErrInvalidConfig, err)
	}
	port, _ := strconv.Atoi(portStr)
	if m := n.localMeta().encode(); len(m) > memberlist.MetaMaxSize {
		return fmt.Errorf("%w: gossip metadata is %d bytes, at most %d", ErrInvalidConfig, len(m), memberlist.MetaMaxSize)
	}
	g := &gossip{
		members:    map[string]*member{},
		refused:    map[string]time.Time{},
		reclaiming: map[string]bool{},
		kick:       make(chan struct{}, 1),
	}
	n.gossip = g

	mc := memberlist.DefaultLANConfig()
	mc.Name = n.cfg.NodeName
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = host, port
	if a := n.cfg.GossipAdvertise; a != "" {
		ahost, aport, _ := net.SplitHostPort(a) // checked by Validate
		mc.AdvertiseAddr = ahost
		mc.AdvertisePort, _ = strconv.Atoi(aport)
	}
	keys := [][]byte{append([]byte(nil), n.cfg.GossipKey...)}
	for _, k := range n.cfg.GossipKeys {
		keys = append(keys, append([]byte(nil), k...))
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return fmt.Errorf("%w: gossip keys: %v", ErrInvalidConfig, err)
	}
	mc.Keyring = kr
	g.keyring = kr
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	mc.DeadNodeReclaimTime = gossipDeadNodeReclaim
	d := &gossipDelegate{n: n}
	mc.Delegate = d
	mc.Events = d
	mc.Alive = d
	mc.Merge = d
	mc.Conflict = d
	mc.Logger = log.New(&memberlistLogWriter{l: n.logger.With("logger", "memberlist")}, "", 0)
	if tune != nil {
		tune(mc)
	}
	// The transport adds the gossip label outside memberlist (see
	// GossipLabelMode); leave room for it in every packet, so a labelled
	// packet stays within the size memberlist aims for.
	mc.UDPBufferSize -= 2 + len(gossipLabel)
	var bt *boundTransport
	if mc.Transport == nil {
		// memberlist's own transport, with TCP dials from the bind IP,
		// inbound streams bounded and guarded, and the gossip label.
		conns, err := connlimit.New(connlimit.Config{
			Name: "gossip", Max: n.cfg.MaxGossipStreams, FirstByteTimeout: n.cfg.FirstByteTimeout,
			Timeout: mc.TCPTimeout, Logger: n.logger,
		})
		if err != nil {
			return fmt.Errorf("%w: gossip streams: %v", ErrInvalidConfig, err)
		}
		if bt, err = newBoundTransport(mc, mc.Logger, conns, n.cfg.GossipLabel, n.logger); err != nil {
			return fmt.Errorf("cluster: start gossip on %s: %w", n.cfg.GossipAddr, err)
		}
		g.conns = conns
		mc.Transport = bt
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if bt != nil {
			_ = bt.Shutdown() // a second Shutdown, when memberlist did one, is harmless
		}
		return fmt.Errorf("cluster: start gossip on %s: %w", n.cfg.GossipAddr, err)
	}
	g.mu.Lock() // retryReclaim may read it from a delegate callback already
	g.ml = ml
	g.mu.Unlock()
	// memberlist wrote the port it bound back into mc when asked for 0.
	g.addr = net.JoinHostPort(mc.AdvertiseAddr, strconv.Itoa(mc.AdvertisePort))
	n.logger.Info("gossip started", "address", n.gossipAddr(), "seeds", n.cfg.Join)
	n.wg.Add(1)
	go n.joinLoop()
	return nil
}

// gossipAddr is the address memberlist advertises (with the real port
// when GossipAddr asked for port 0).
func (n *Node) gossipAddr() string {
	if n.gossip == nil {
		return ""
	}
	return n.gossip.addr
}

// joinLoop joins the seeds, retrying with backoff until another node
// answers, and afterwards whenever this node knows no other alive node or
// fewer alive peers than raft has servers (a restarted node whose peers
// forgot it, or a healed partition).
//
// A seed may name this node by a spelling the filter below cannot
// recognise (its own DNS name, as a StatefulSet's seed list does, or
// localhost): memberlist then "joins" itself and counts it as contacted.
// So joined means another member was reached (NumMembers > 1), never
// merely that Join contacted someone.
func (n *Node) joinLoop() {
	defer n.wg.Done()
	self := n.gossipAddr()
	var seeds []string
	for _, s := range n.cfg.Join {
		if s != self && s != n.cfg.GossipAddr && s != n.cfg.GossipAdvertise {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return
	}
	wait := time.Duration(0)
	joined := false
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
		if n.left.Load() {
			return
		}
		if joined && !n.needRejoin() {
			wait = joinRetryMax
			continue
		}
		cnt, err := n.gossip.ml.Join(seeds)
		switch {
		case cnt > 0 && n.gossip.ml.NumMembers() > 1:
			if !joined {
				n.logger.Info("joined gossip", "seeds", seeds, "contacted", cnt)
			}
			joined = true
			wait = joinRetryMax
		case cnt > 0:
			n.logger.Info("gossip join reached no other node (a seed names this node); retrying", "seeds", seeds, "error", err)
			wait = min(max(2*wait, joinRetryMin), joinRetryMax)
		case isKeyError(err):
			n.logger.Error("gossip join refused: the seeds cannot decrypt this node's messages or it cannot decrypt theirs; this node's gossip key does not match the cluster's (check <ca-dir>/gossip.key)", "seeds", seeds, "error", err)
			wait = min(max(2*wait, joinRetryMin), joinRetryMax)
		default:
			n.logger.Warn("gossip join failed; retrying", "seeds", seeds, "error", err)
			wait = min(max(2*wait, joinRetryMin), joinRetryMax)
		}
	}
}

// needRejoin reports whether this node knows no other alive gossip member,
// or fewer than the raft configuration has servers. (A node without a
// configuration yet, waiting to bootstrap or to be added, needs a peer all
// the more.)
func (n *Node) needRejoin() bool {
	alive := n.gossip.ml.NumMembers()
	if alive <= 1 {
		return true
	}
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return false
	}
	return alive < len(fut.Configuration().Servers)
}

// isKeyError recognises memberlist's errors for a gossip key mismatch.
func isKeyError(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "decrypt") || strings.Contains(s, "not encrypted") || strings.Contains(s, "encryption is not configured")
}

// gossipDelegate is memberlist's view of the Node. It is a separate type
// so that the delegate methods do not become part of Node's API.
type gossipDelegate struct{ n *Node }

var (
	_ memberlist.Delegate         = (*gossipDelegate)(nil)
	_ memberlist.EventDelegate    = (*gossipDelegate)(nil)
	_ memberlist.AliveDelegate    = (*gossipDelegate)(nil)
	_ memberlist.MergeDelegate    = (*gossipDelegate)(nil)
	_ memberlist.ConflictDelegate = (*gossipDelegate)(nil)
)

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	b := d.n.localMeta().encode()
	if len(b) > limit {
		return nil // checked at start; never truncate JSON
	}
	return b
}

func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyAlive admits a peer, or refuses it (memberlist then ignores the
// alive message, so the peer never becomes a member here).
func (d *gossipDelegate) NotifyAlive(peer *memberlist.Node) error {
	if err := d.n.admit(peer.Name, peer.Meta); err != nil {
		d.n.logRefusal(peer.Name, peer.Address(), err)
		return err
	}
	return nil
}

// NotifyMerge cancels a join (either direction) with a node that knows
// peers of another cluster, so the joiner gets an error at once.
func (d *gossipDelegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		meta, err := decodeMeta(p.Meta)
		if err != nil {
			err = fmt.Errorf("refusing to merge with gossip member %q: %v", p.Name, err)
			d.n.logRefusal(p.Name, p.Address(), err)
			return err
		}
		if meta.Cluster != d.n.cfg.ClusterID {
			err := fmt.Errorf("refusing to merge with gossip member %q: it belongs to another cluster (cluster id %q, ours %q; was it started with another CA?)", p.Name, meta.Cluster, d.n.cfg.ClusterID)
			d.n.logRefusal(p.Name, p.Address(), err)
			return err
		}
	}
	return nil
}

// NotifyConflict: two nodes claim one name from different addresses.
// memberlist keeps the one it knew first and ignores the other.
func (d *gossipDelegate) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name == d.n.cfg.NodeName {
		d.n.logger.Error("refused: another node uses this node's name; this node will not join that cluster. Give each node a unique --node-name",
			"name", existing.Name, "this_gossip_addr", existing.Address(), "other_gossip_addr", other.Address())
		return
	}
	d.n.logRefusal(other.Name, other.Address(), fmt.Errorf("duplicate node name: %q is already used by the member at %s", other.Name, existing.Address()))
	d.n.retryReclaim(other.Name, other.Address())
}

// retryReclaim joins addr, where memberlist just refused the known member
// name as conflicting, once gossipDeadNodeReclaim has passed. A member
// restarted at a new address (a pod with a new IP) announces itself when
// it starts, often before its old entry is even dead, and then only at
// its push/pull every 30 s; this takes it back as soon as memberlist
// allows. If the old holder is alive (two processes, one name) the join
// is refused again and another retry is scheduled: one push/pull per
// reclaim period, no more. At most one retry per name is pending.
func (n *Node) retryReclaim(name, addr string) {
	g := n.gossip
	g.mu.Lock()
	if g.reclaiming[name] {
		g.mu.Unlock()
		return
	}
	g.reclaiming[name] = true
	g.mu.Unlock()
	// Not in n.wg: it may start while Shutdown waits. It ends with n.ctx,
	// and a Join on a memberlist that has shut down fails at once.
	go func() {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(gossipDeadNodeReclaim + time.Second):
		}
		g.mu.Lock()
		delete(g.reclaiming, name) // before Join: a refusal schedules anew
		ml := g.ml
		g.mu.Unlock()
		if n.left.Load() || ml == nil {
			return
		}
		for _, m := range ml.Members() {
			if m.Name == name && m.Address() == addr {
				return // taken back meanwhile
			}
		}
		if _, err := ml.Join([]string{addr}); err != nil {
			n.logger.Debug("gossip: retrying a refused member's new address failed", "member", name, "gossip_addr", addr, "error", err)
		}
	}()
}

func (d *gossipDelegate) NotifyJoin(p *memberlist.Node)   { d.update(p) }
func (d *gossipDelegate) NotifyUpdate(p *memberlist.Node) { d.update(p) }

func (d *gossipDelegate) NotifyLeave(p *memberlist.Node) {
	status := StatusFailed
	if meta, err := decodeMeta(p.Meta); p.State == memberlist.StateLeft || (err == nil && meta.Leaving) {
		status = StatusLeft
	}
	d.n.gossip.mu.Lock()
	if m, ok := d.n.gossip.members[p.Name]; ok && (m.meta.Leaving || m.status == StatusLeft) {
		status = StatusLeft
	}
	d.n.gossip.mu.Unlock()
	d.n.gossip.set(p.Name, nil, status)
	d.n.logger.Info("gossip member "+status, "member", p.Name, "gossip_addr", p.Address())
	d.n.gossip.notify()
}

func (d *gossipDelegate) update(p *memberlist.Node) {
	meta, err := decodeMeta(p.Meta)
	if err != nil {
		return // NotifyAlive refused it already
	}
	status := StatusAlive
	if meta.Leaving {
		status = StatusLeft
	}
	d.n.gossip.set(p.Name, &meta, status)
	if p.Name != d.n.cfg.NodeName {
		d.n.logger.Debug("gossip member alive", "member", p.Name, "raft_addr", meta.Raft, "api_addr", meta.API)
	}
	d.n.gossip.notify()
}

// admit decides whether a gossip peer may be a member: it must speak our
// metadata format, belong to our cluster, not claim this node's name, and
// not reuse the raft address of another server.
func (n *Node) admit(name string, rawMeta []byte) error {
	meta, err := decodeMeta(rawMeta)
	if err != nil {
		return err
	}
	if meta.Name != name {
		return fmt.Errorf("metadata names %q, gossip name is %q", meta.Name, name)
	}
	if meta.Cluster != n.cfg.ClusterID {
		return fmt.Errorf("node %q belongs to another cluster (cluster id %q, ours %q; was it started with another CA?)", name, meta.Cluster, n.cfg.ClusterID)
	}
	if name == n.cfg.NodeName {
		if meta.Raft != string(n.trans.LocalAddr()) {
			return fmt.Errorf("duplicate node name: another node (raft address %s) already uses this node's name %q; this node is refused by it, give each node a unique --node-name", meta.Raft, name)
		}
		return nil
	}
	if meta.Raft == string(n.trans.LocalAddr()) {
		return fmt.Errorf("node %q advertises this node's raft address %s", name, meta.Raft)
	}
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return nil
	}
	// A server of the configuration that comes back at another raft
	// address is admitted: the leader moves it only once the node there
	// proves to be that server (moveServer), and memberlist itself refuses
	// a name held by a live member.
	for _, s := range fut.Configuration().Servers {
		if string(s.ID) != name && s.Address == raft.ServerAddress(meta.Raft) {
			return fmt.Errorf("raft address %s of node %q is already used by server %q", meta.Raft, name, s.ID)
		}
	}
	return nil
}

// logRefusal logs a refused gossip peer, rate-limited (logOnce).
func (n *Node) logRefusal(name, addr string, err error) {
	n.logOnce(slog.LevelError, "refused gossip member", name, addr, err)
}

// logOnce logs msg about member name, at most once per refusalLogEvery
// for the same member and reason (gossip repeats what triggers these).
func (n *Node) logOnce(level slog.Level, msg, name, addr string, err error) {
	key := name + "\x00" + err.Error()
	now := time.Now()
	if g := n.gossip; g != nil {
		g.mu.Lock()
		last, seen := g.refused[key]
		if !seen || now.Sub(last) >= refusalLogEvery {
			g.refused[key] = now
		} else {
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
	}
	args := []any{"member", name, "reason", err.Error()}
	if addr != "" {
		args = append(args, "gossip_addr", addr)
	}
	n.logger.Log(context.Background(), level, msg, args...)
}

// memberlistLogWriter turns memberlist's "[LEVEL] memberlist: msg" lines
// into slog records. Debug lines are dropped. A decryption failure is
// rewritten into a clear refusal: it is what a wrong gossip key looks
// like from the receiving side.
type memberlistLogWriter struct{ l *slog.Logger }

func (w *memberlistLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\r\n")
	level := slog.LevelInfo
	for prefix, lv := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError} {
		if strings.HasPrefix(line, prefix) {
			level = lv
			line = strings.TrimSpace(strings.TrimPrefix(line, prefix))
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if level == slog.LevelDebug {
		return len(p), nil
	}
	if isKeyError(errors.New(line)) {
		w.l.Error("refused gossip message: it is not encrypted with this cluster's gossip key (a node with a wrong or missing gossip key?)", "detail", line)
		return len(p), nil
	}
	w.l.Log(context.Background(), level, line)
	return len(p), nil
}
