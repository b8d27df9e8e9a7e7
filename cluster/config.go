package cluster

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Raft timing, chosen for the availability target of the HA issue: after
// the leader is killed, writes resume within about 1 s (median) and under
// 3 s (worst case) with all three nodes on one loaded 2-core machine.
//
//   - A follower notices the dead leader after a random wait between
//     HeartbeatTimeout and 2×HeartbeatTimeout (350–700 ms) without
//     contact, becomes a candidate, and wins in one round trip unless the
//     vote splits; a split retries after another randomised
//     ElectionTimeout (350–700 ms). Median outage is therefore roughly
//     0.5 s plus an election round, the new leader's term barrier and the
//     followers' 50 ms leader poll when forwarding. Measured (docs/
//     BENCHMARKS.md): median about 0.8 s, worst about 1.3 s over 10 kills.
//     At 500 ms the median was about 1.07 s, over the target.
//   - LeaderLeaseTimeout (350 ms, equal to HeartbeatTimeout, the most
//     raft allows) is how long a leader keeps leading without a quorum's
//     answers to its heartbeats. It is the tightest of the three under
//     CPU saturation (issue 12): a follower starts an election only after
//     HeartbeatTimeout of silence checked at a random moment in
//     [HeartbeatTimeout, 2×HeartbeatTimeout], and with pre-vote the other
//     follower refuses it while it still hears the leader; but a leader
//     whose own process is starved sees both followers late at once and
//     steps down. At 200 ms, with 3 nodes and 16 writers on 2 cores, 60 s
//     runs had 1–3 elections each beside 4 spinning processes and one run
//     in three had one beside 2; every election whose log was read began
//     with such a step-down (both followers last heard 205–300 ms ago).
//     At 350 ms, 6 runs beside 2, 4 and 8 spinning processes had none
//     (BenchmarkElectionsUnderCPUSaturation, docs/BENCHMARKS.md).
//     Raising it does not slow failover after a crash (followers detect a
//     dead leader by HeartbeatTimeout), and it costs no safety: reads are
//     confirmed by a quorum round (VerifyLeader), never by the lease, and
//     writes must commit. A partitioned old leader steps down about
//     LeaderLeaseTimeout after its last contact (raft checks again when
//     the oldest contact would expire), about the earliest moment a
//     follower may start an election, so two nodes rarely both act as
//     leader, and then briefly; meanwhile only the old leader's local
//     reads (resourceVersion=0, watches) may lag, which --max-stale-read
//     already bounds more loosely.
//   - The causes are scheduling, not disk or GC: the heartbeat path
//     touches neither the log nor fsync (raft's leader sends heartbeats
//     from their own goroutine on a connection no other RPC uses
//     meanwhile, and a follower's transport answers them without its main
//     loop), and Go's GC stop-the-world pauses measured under the same
//     load were at most 8 ms (p50 0.15 ms), against a 35 ms heartbeat
//     interval. What delays a heartbeat is the process not being run: the
//     CPU shared with busy processes at the same priority, and the node's
//     own goroutines (request handlers, the apply loop) in front of it in
//     the Go run queue.
//   - Not lower: raft sends heartbeats every HeartbeatTimeout/10 (35 ms);
//     on a busy 2-core machine, timeouts in the 100–200 ms range make
//     leaders step down and followers start needless elections
//     (flapping), which costs more availability than it saves. Not
//     higher: at 500 ms the median failover after a kill was about
//     1.07 s, over the target.
const (
	raftHeartbeatTimeout   = 350 * time.Millisecond
	raftElectionTimeout    = 350 * time.Millisecond
	raftLeaderLeaseTimeout = 350 * time.Millisecond
)

// Config is everything a Node needs. The cmd package fills it from flags;
// nothing in this package reads flags or the environment. Zero durations
// and counts take the defaults from DefaultConfig when New is called, so a
// caller sets only what it cares about.
type Config struct {
	// NodeName is the raft ServerID. It must stay the same across restarts
	// of one node and be unique in the cluster.
	NodeName string
	// DataDir holds the raft log and snapshots (in DataDir/raft).
	DataDir string
	// RaftAddr is the host:port raft listens on, and the address it gives
	// peers unless RaftAdvertise is set. An unspecified host (0.0.0.0, ::)
	// binds every interface and then needs RaftAdvertise, because peers
	// cannot dial it. Port 0 picks a free port (tests only: peers cannot
	// know it in advance).
	RaftAddr string
	// RaftAdvertise is the host:port peers dial for this node's raft and
	// internal RPC, when it differs from RaftAddr (a node bound to 0.0.0.0,
	// or behind an address translation). It is the node's raft address in
	// the configuration and in gossip.
	RaftAdvertise string
	// BootstrapExpect is the number of servers to see before the first
	// election. 1 bootstraps a single-node cluster on the first start; 0
	// never bootstraps (the node waits to be added). Larger values need
	// gossip (GossipAddr): while raft has no state, the node waits until it
	// sees that many alive servers of its cluster, all started with the
	// same value, checks over the internal RPC that none of them has raft
	// state, and bootstraps the identical, name-sorted server list (see
	// bootstrap.go). A node that finds an existing cluster waits to be
	// added by its leader instead.
	BootstrapExpect int
	// Replica makes the node a read replica: the leader adds it to the
	// Raft configuration as a non-voter, so it receives the log and serves
	// reads from its own state, but never votes, never counts toward a
	// quorum, never leads (so it never runs the controllers) and is never
	// promoted, however caught up it is. A replica never bootstraps: it
	// needs gossip and BootstrapExpect 0 (or the voters' value, which it
	// then ignores). The role is the node's own word, over gossip and the
	// internal RPC, both of which only nodes of the cluster can speak; a
	// server's suffrage, once added, changes only by removal and a new
	// join.
	Replica bool

	// GossipAddr is the host:port memberlist binds to (UDP and TCP), and
	// advertises unless GossipAdvertise is set; an unspecified host needs
	// GossipAdvertise. Empty disables gossip: no discovery, no automatic
	// voter management, and Leave only stops the node (single-node tests
	// and single-node servers). Port 0 picks a free port (tests only).
	GossipAddr string
	// GossipAdvertise is the IP:port other nodes reach this node's gossip
	// at, when it differs from GossipAddr.
	GossipAdvertise string
	// GossipKey is the 32-byte AES-256 key every gossip message is
	// encrypted and authenticated with (memberlist SecretKey, with
	// GossipVerifyIncoming and GossipVerifyOutgoing). Required when
	// GossipAddr is set. A node with another key cannot join: its messages
	// fail to decrypt and are logged as refused.
	GossipKey []byte
	// GossipKeys are further keys gossip decrypts with, besides GossipKey:
	// the keys of a gossip-key rotation in progress, as this node last
	// applied them (api/gossipkeys; Node.SetGossipKeys changes the set
	// live). Each is 32 bytes.
	GossipKeys [][]byte
	// Join lists gossip addresses (host:port) of existing or starting
	// nodes to join through. The node retries them in the background until
	// one answers, so they need not be up yet. May include this node.
	Join []string
	// APIAddr is this node's advertised HTTPS API address, carried in the
	// gossip metadata so that followers can forward writes to the leader
	// (LeaderAPIAddr).
	APIAddr string
	// ClusterID identifies the cluster (cmd sets the hex SHA-256 of the CA
	// certificate). Gossip peers with a different ClusterID are refused,
	// so two clusters sharing a gossip key still never merge. Empty is
	// allowed and matches only peers with an empty ClusterID.
	ClusterID string
	// DeadServerTimeout is the autopilot rule: a voter that gossip has
	// reported failed (not left) for this long is removed by the leader,
	// but only once the leader's raft has lost contact with it too (gossip
	// silence alone never removes a voter), and only while the alive
	// voters still form a majority of the configuration that includes it,
	// so removal never costs the quorum.
	// 0 means the default (5m); negative disables the rule (a failed voter
	// then stays until RemoveMember).
	DeadServerTimeout time.Duration

	// TLS carries the node certificate and the CA pool for raft's mutual
	// TLS: Certificates (or both GetCertificate and GetClientCertificate) and
	// RootCAs and/or ClientCAs (either is used for both directions when the
	// other is nil). The node certificate must allow both client and server
	// auth, because it is presented when dialling and when accepting.
	// ServerName, if set, is the name checked in every peer's certificate;
	// otherwise the host of the peer's raft address is, so node
	// certificates must then carry their raft host as a SAN. Any
	// VerifyPeerCertificate / VerifyConnection hook is kept, which is where
	// a caller restricts peers to node identities. The config is cloned.
	TLS *tls.Config
	// PeerName names the node at the other end of an accepted internal RPC
	// connection, from the certificate it proved: conn is a TLS connection
	// with a ConnectionState method (a *tls.Conn wrapped by the layer
	// that tracks live connections). The RPC honours a removal only for the caller's
	// own name, so it must come from the credential, never from the
	// request. Nil means no removal is honoured over the RPC: Leave then
	// works only on the leader itself.
	PeerName func(conn net.Conn) (string, error)
	// CommitTimeout is how long raft's leader lets a follower go without
	// an append when no new entry needs one: the longest a follower takes
	// to learn that entries it holds have committed. A follower's read
	// index waits for exactly that (to apply up to the leader's commit
	// index), so its linearizable reads, and the writes it executes
	// (--execute-writes=local), wait up to CommitTimeout in a lull. 0 is
	// raft's 50 ms. At 5 ms a follower-executed create's p99 went from
	// 86 ms to 18 ms, and three idle nodes from 0.064 to 0.131 cores
	// (docs/BENCHMARKS.md), so the API sets it only with local writes.
	CommitTimeout time.Duration
	// ApplyTimeout bounds how long Propose waits for raft to accept an
	// entry (including waiting for a leader to be elected), and how long
	// ReadIndex waits for a new leader's term barrier or, on a follower,
	// for a leader that confirms a read index.
	ApplyTimeout time.Duration
	// LeaderWait bounds how long Submit, on a node that is not the
	// leader, waits for a leader it can reach before it answers
	// ErrNoLeader (nothing written): the API's --write-leader-wait, the
	// same bound a forwarded write waits, so that a write answers alike
	// in both modes. 0 is ApplyTimeout.
	LeaderWait time.Duration
	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (checked every SnapshotInterval). Default 8192: a
	// snapshot is a clone plus a serialisation of the whole MVCC store, so
	// taking one every few thousand writes keeps its cost amortised while
	// bounding restart replay (snapshot restore plus at most
	// SnapshotThreshold+TrailingLogs entries) to a second or two.
	SnapshotThreshold uint64
	// SnapshotInterval is how often raft checks SnapshotThreshold
	// (default 30s, raft's own default is 120s; shorter keeps the log
	// compacted under bursty load).
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries are kept after a snapshot (log
	// compaction deletes the rest), so a briefly lagging or restarted
	// follower catches up from the log instead of needing the whole
	// snapshot. Default 10240: about one default SnapshotThreshold plus
	// slack, i.e. a follower may miss roughly one snapshot period of
	// writes and still catch up by log replay; one further behind is sent
	// the latest snapshot (InstallSnapshot) and replays from there.
	TrailingLogs uint64
	// Features name what this build can do that older builds cannot, for
	// steps that must wait until every voter can (Member.Features): a
	// data-key encryption rotation is refused while a voter could not read
	// the values it seals. Reported to peers in the stats RPC.
	Features []string
	// Facts, when set, are what the node reports about itself in the stats
	// RPC (Member.Facts), read at each call: the node CA its certificate
	// is issued by, which a node CA rotation's finish waits on.
	Facts func() map[string]string
	// Version is the release the node runs (package trustplane's Version),
	// which it reports in the stats RPC (Member.Version) so that an
	// operator sees the builds a rolling upgrade mixes; empty reports none.
	Version string
	// Formats are the versions of each format this build reads, by name
	// (FormatRaftEntry, ...; package trustplane's Formats), reported to
	// peers in the stats RPC: a node writes a newer version of a format
	// only once every member reads it (formats.go). Nil reports none, as
	// a build from before formats were advertised: peers then write
	// version 1 of each for it, and so does this node.
	Formats map[string]Reads
	// CompactRetention is how much MVCC history the fsm keeps: the leader
	// compacts at the applied index of this long ago, every
	// CompactInterval. It is the continue-token lifetime and must cover the
	// watch window; the specification's default for both is 5 minutes, so
	// a token lives 5 to 6 minutes (kube: 5 to 10, etcd's compaction
	// period). Reads older than it get 410 Gone. Zero means the defaults
	// (5 min, every minute); negative disables compaction by age.
	CompactRetention time.Duration
	CompactInterval  time.Duration
	// CompactMaxBytes bounds the MVCC history in bytes (the values of
	// superseded and deleted versions, fsm.HistoryBytes): when it is
	// exceeded, the leader compacts through the log, whatever the
	// retention, down to three quarters of it, keeping the newest history.
	// It is checked every second (or CompactInterval, if shorter), so a
	// burst may overshoot it for that long. Zero means the default
	// (512 MiB); negative disables the byte bound.
	CompactMaxBytes int64
	// MaxPendingHandshakes bounds the raft-port connections that are in
	// their TLS handshake (or have not sent their first byte) at once, and
	// HandshakeTimeout how long each may take (package connlimit). A new
	// connection is never refused: a full table closes its oldest, and
	// one peer address holds at most an eighth of it, so idle sockets
	// cannot keep a peer from reconnecting. Raft's established
	// connections are never affected. Zero means the defaults (128, 10s).
	MaxPendingHandshakes int
	HandshakeTimeout     time.Duration
	// FirstByteTimeout is how long a new raft-port or gossip-port
	// connection may take to send its first byte (on the raft port, the
	// TLS ClientHello); HandshakeTimeout still bounds the rest. Zero means
	// the default (2s).
	FirstByteTimeout time.Duration
	// MaxGossipStreams bounds the inbound gossip TCP streams (push/pull
	// state exchanges, TCP pings) served at once, in the same kind of
	// table as the raft port's: a full table closes its oldest stream.
	// Each stream is also refused before memberlist reads it when it
	// declares more than maxGossipStreamBytes (gossiptransport.go). Zero
	// means the default (32).
	MaxGossipStreams int
	// GossipLabel is how this node uses trustplane's gossip label, a
	// header before every gossip packet and stream that lets a node refuse
	// traffic not meant for a trustplane cluster before decrypting it
	// (gossiptransport.go). Empty means GossipLabelAccept, which nodes
	// without labels understand; see GossipLabelMode for the rolling
	// upgrade to GossipLabelRequire.
	GossipLabel GossipLabelMode
	// Logger receives the node's and raft's logs (raft's at Info and up).
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every tunable set. The caller must
// still set NodeName, DataDir, RaftAddr and TLS.
func DefaultConfig() *Config {
	return &Config{
		BootstrapExpect:      1,
		ApplyTimeout:         10 * time.Second,
		SnapshotThreshold:    8192,
		SnapshotInterval:     30 * time.Second,
		TrailingLogs:         10240,
		CompactRetention:     5 * time.Minute,
		CompactInterval:      time.Minute,
		CompactMaxBytes:      512 << 20,
		MaxPendingHandshakes: 128,
		HandshakeTimeout:     10 * time.Second,
		FirstByteTimeout:     2 * time.Second,
		MaxGossipStreams:     32,
		GossipLabel:          GossipLabelAccept,
		DeadServerTimeout:    5 * time.Minute,
		Logger:               slog.Default(),
	}
}

// withDefaults returns a copy of c with zero tunables replaced by their
// defaults. The caller's struct is never modified.
func (c *Config) withDefaults() *Config {
	out := *c
	d := DefaultConfig()
	if out.ApplyTimeout == 0 {
		out.ApplyTimeout = d.ApplyTimeout
	}
	if out.LeaderWait == 0 {
		out.LeaderWait = out.ApplyTimeout
	}
	if out.SnapshotThreshold == 0 {
		out.SnapshotThreshold = d.SnapshotThreshold
	}
	if out.SnapshotInterval == 0 {
		out.SnapshotInterval = d.SnapshotInterval
	}
	if out.TrailingLogs == 0 {
		out.TrailingLogs = d.TrailingLogs
	}
	if out.CompactRetention == 0 {
		out.CompactRetention = d.CompactRetention
	}
	if out.CompactInterval == 0 {
		out.CompactInterval = d.CompactInterval
	}
	if out.CompactMaxBytes == 0 {
		out.CompactMaxBytes = d.CompactMaxBytes
	}
	if out.DeadServerTimeout == 0 {
		out.DeadServerTimeout = d.DeadServerTimeout
	}
	if out.FirstByteTimeout == 0 {
		out.FirstByteTimeout = d.FirstByteTimeout
	}
	if out.MaxGossipStreams == 0 {
		out.MaxGossipStreams = d.MaxGossipStreams
	}
	if out.GossipLabel == "" {
		out.GossipLabel = d.GossipLabel
	}
	if out.Logger == nil {
		out.Logger = d.Logger
	}
	return &out
}

// Validate reports the first problem with c, wrapped in ErrInvalidConfig.
// Zero tunables are valid (they mean "default").
func (c *Config) Validate() error {
	if err := c.validateCommon(); err != nil {
		return err
	}
	return c.validateNetwork()
}

// validateCommon checks what every node needs, whatever its transport.
func (c *Config) validateCommon() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c == nil:
		return bad("nil config")
	case c.NodeName == "":
		return bad("NodeName is empty")
	case c.DataDir == "":
		return bad("DataDir is empty")
	case c.BootstrapExpect < 0:
		return bad("BootstrapExpect %d is negative", c.BootstrapExpect)
	case c.ApplyTimeout < 0:
		return bad("ApplyTimeout %s is negative", c.ApplyTimeout)
	case c.LeaderWait < 0:
		return bad("LeaderWait %s is negative", c.LeaderWait)
	case c.CommitTimeout < 0:
		return bad("CommitTimeout %s is negative", c.CommitTimeout)
	case c.SnapshotInterval < 0:
		return bad("SnapshotInterval %s is negative", c.SnapshotInterval)
	case c.MaxPendingHandshakes < 0 || c.HandshakeTimeout < 0:
		return bad("MaxPendingHandshakes %d and HandshakeTimeout %s must not be negative", c.MaxPendingHandshakes, c.HandshakeTimeout)
	case c.FirstByteTimeout < 0 || c.MaxGossipStreams < 0:
		return bad("FirstByteTimeout %s and MaxGossipStreams %d must not be negative", c.FirstByteTimeout, c.MaxGossipStreams)
	case c.FirstByteTimeout > 0 && c.HandshakeTimeout > 0 && c.FirstByteTimeout > c.HandshakeTimeout:
		return bad("FirstByteTimeout %s is longer than HandshakeTimeout %s", c.FirstByteTimeout, c.HandshakeTimeout)
	}
	if _, err := c.GossipLabel.sends(); err != nil {
		return bad("%v", err)
	}
	return c.validateGossip()
}

// validateGossip checks the discovery settings.
func (c *Config) validateGossip() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.Replica && (c.GossipAddr == "" || c.BootstrapExpect == 1) {
		return bad("a replica joins an existing cluster through gossip: it needs GossipAddr, and BootstrapExpect must not be 1")
	}
	if c.GossipAddr == "" {
		if c.BootstrapExpect > 1 {
			return bad("BootstrapExpect %d needs gossip (GossipAddr) to find the other servers", c.BootstrapExpect)
		}
		if len(c.Join) > 0 {
			return bad("Join needs gossip (GossipAddr)")
		}
		return nil
	}
	if c.BootstrapExpect == 1 && len(c.Join) > 0 {
		return bad("BootstrapExpect 1 bootstraps a cluster of its own, which can then never join the cluster at Join; use 0 to join an existing cluster, or the value the cluster was formed with")
	}
	host, port, err := net.SplitHostPort(c.GossipAddr)
	if err != nil {
		return bad("GossipAddr %q: %v", c.GossipAddr, err)
	}
	if ip := net.ParseIP(host); ip == nil {
		return bad("GossipAddr %q: host must be an IP address", c.GossipAddr)
	} else if ip.IsUnspecified() && c.GossipAdvertise == "" {
		return bad("GossipAddr %q binds every interface; set GossipAdvertise (--gossip-advertise-addr or --advertise-address) to the address peers reach", c.GossipAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return bad("GossipAddr %q: bad port", c.GossipAddr)
	}
	if c.GossipAdvertise != "" {
		ahost, aport, err := net.SplitHostPort(c.GossipAdvertise)
		if err != nil {
			return bad("GossipAdvertise %q: %v", c.GossipAdvertise, err)
		}
		if ip := net.ParseIP(ahost); ip == nil || ip.IsUnspecified() {
			return bad("GossipAdvertise %q: host must be an IP address peers can reach", c.GossipAdvertise)
		}
		if p, err := strconv.ParseUint(aport, 10, 16); err != nil || p == 0 {
			return bad("GossipAdvertise %q: bad port", c.GossipAdvertise)
		}
	}
	if len(c.GossipKey) != 32 {
		return bad("GossipKey must be 32 bytes (AES-256), got %d", len(c.GossipKey))
	}
	for i, k := range c.GossipKeys {
		if len(k) != 32 {
			return bad("GossipKeys[%d] must be 32 bytes (AES-256), got %d", i, len(k))
		}
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return bad("Join address %q: %v", j, err)
		}
	}
	if m := (nodeMeta{V: metaVersion, Name: c.NodeName, Raft: c.raftAdvertise(), API: c.APIAddr, Cluster: c.ClusterID, Expect: c.BootstrapExpect}).encode(); len(m) > memberlist.MetaMaxSize {
		return bad("NodeName, RaftAddr, APIAddr and ClusterID are too long for gossip metadata (%d bytes, at most %d)", len(m), memberlist.MetaMaxSize)
	}
	return nil
}

// validateNetwork checks the raft address and TLS settings used by the
// real network transport.
func (c *Config) validateNetwork() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	host, port, err := net.SplitHostPort(c.RaftAddr)
	if err != nil {
		return bad("RaftAddr %q: %v", c.RaftAddr, err)
	}
	if c.RaftAdvertise == "" {
		if host == "" {
			return bad("RaftAddr %q has no host; peers need an address they can dial (or set RaftAdvertise)", c.RaftAddr)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return bad("RaftAddr %q binds every interface; set RaftAdvertise (--raft-advertise-addr or --advertise-address) to the address peers dial", c.RaftAddr)
		}
	} else {
		ahost, aport, err := net.SplitHostPort(c.RaftAdvertise)
		if err != nil {
			return bad("RaftAdvertise %q: %v", c.RaftAdvertise, err)
		}
		if ip := net.ParseIP(ahost); ahost == "" || ip != nil && ip.IsUnspecified() {
			return bad("RaftAdvertise %q is not an address peers can dial", c.RaftAdvertise)
		}
		if p, err := strconv.ParseUint(aport, 10, 16); err != nil || p == 0 {
			return bad("RaftAdvertise %q: bad port", c.RaftAdvertise)
		}
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil {
		return bad("RaftAddr %q: bad port", c.RaftAddr)
	} else if p == 0 && c.BootstrapExpect != 1 {
		return bad("RaftAddr %q: port 0 is only usable by a single-node cluster", c.RaftAddr)
	}
	if c.TLS == nil {
		return bad("TLS is required: raft traffic is always mutual TLS")
	}
	if len(c.TLS.Certificates) == 0 && (c.TLS.GetCertificate == nil || c.TLS.GetClientCertificate == nil) {
		return bad("TLS has no node certificate (Certificates, or both GetCertificate and GetClientCertificate)")
	}
	if c.TLS.RootCAs == nil && c.TLS.ClientCAs == nil && c.TLS.VerifyConnection == nil {
		return bad("TLS verifies no peer: it needs a CA pool (RootCAs or ClientCAs), or a VerifyConnection that verifies chains itself")
	}
	return nil
}

// raftAdvertise is the raft address peers dial.
func (c *Config) raftAdvertise() string {
	if c.RaftAdvertise != "" {
		return c.RaftAdvertise
	}
	return c.RaftAddr
}
