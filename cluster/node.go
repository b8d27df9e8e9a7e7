package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/connlimit"
	"github.com/trustplane/trustplane/internal/failpoint"
)

const (
	// caughtUpSlack is how far (in log entries) the local FSM may trail
	// raft's commit index and still count as caught up for /readyz. A node
	// installing a snapshot is further behind and should not receive
	// traffic yet. A node replaying its log after a restart is not caught
	// by this (its commit index is 0 until the leader's first append):
	// LeaderContactWithin is, and /readyz checks both.
	caughtUpSlack = 1000

	// logCacheSize is how many recent entries are kept in memory in front
	// of the WAL, so replication to followers rarely reads the disk.
	logCacheSize = 512

	// snapshotsRetained is how many snapshots the file store keeps.
	snapshotsRetained = 2

	// boltOpenTimeout bounds the wait for the lock of a raft.db being
	// migrated (logstore.go). Another process holding it means the data
	// directory is in use; failing beats hanging.
	boltOpenTimeout = 2 * time.Second

	// transportMaxPool and transportTimeout configure raft's network
	// transport: pooled connections per peer, and the I/O deadline per RPC.
	transportMaxPool = 3
	transportTimeout = 10 * time.Second
)

// Node is one member of the raft cluster: it owns raft, its stores and its
// transport, and offers the write path (Propose), the linearizable read
// path (ReadIndex) and the leadership and health signals the rest of the
// server needs. All methods are safe for concurrent use.
type Node struct {
	cfg *Config
	fsm *fsm.FSM
	// logs is raft's log store, read when resolving an entry appended
	// before leadership was lost (propose.go).
	logs   raft.LogStore
	raft   *raft.Raft
	trans  raft.Transport
	logger *slog.Logger

	// closers are closed after raft has stopped (the log store).
	closers []io.Closer

	observer *raft.Observer
	obsCh    chan raft.Observation

	// contact is the leader's view of which followers raft reaches
	// (contact.go), fed by its own observer.
	contact         *raftContact
	contactObserver *raft.Observer

	// fresh samples the commit index for the staleness bound (fresh.go).
	fresh freshness

	// counters count leadership events for Status (status.go), from an
	// observer whose filter counts and forwards nothing.
	counters        raftCounters
	counterObserver *raft.Observer

	// metrics are the histograms this node records (metrics.go).
	metrics *raftMetrics

	// dataDir is this data directory's identity (datadir.go).
	dataDir string

	// excluded is set when the leader reported a configuration without
	// this node (configcheck.go); InConfiguration is then false.
	excluded atomic.Bool

	// ctx ends when Shutdown starts; every wait in this package also
	// watches it, so no caller outlives the node.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// readyTerm is the term whose barrier command has applied locally (0:
	// none). Read-ready means: leader, and the current term is readyTerm.
	readyTerm atomic.Uint64

	// formats is the cluster's version of each format as this node last
	// found it (formats.go); nil until the first refresh.
	formats atomic.Pointer[formatView]

	// stateCh is closed and replaced whenever leadership, the known leader
	// or read-readiness may have changed; waiters re-check on wake-up.
	stateMu sync.Mutex
	stateCh chan struct{}

	// Read-index rounds (see readindex.go): the leader's local
	// verification rounds and a follower's remote read-index rounds.
	local       roundQueue
	roundHook   atomic.Pointer[func()] // tests: runs inside a round after the commit index is captured
	remote      roundQueue
	remoteHook  atomic.Pointer[func()] // tests: runs at the start of a remote round
	proposeHook atomic.Pointer[func()] // tests: runs as the leader takes a proposal from another node
	// proposals are the commands Submit sends to a leader, queued per
	// leader address (submit.go).
	proposals proposalQueues

	// dialRPC opens an internal RPC connection to a node by its raft
	// address (nil: no internal RPC, followers cannot forward).
	dialRPC func(context.Context, raft.ServerAddress) (net.Conn, error)
	// rpcPool keeps idle internal RPC connections for reuse.
	rpcPool rpcPool
	// recheck closes the raft port's connections whose peer the trust of
	// the moment no longer accepts (nil: an in-memory transport).
	recheck func() int
	// minFreeBytes overrides the free-space floor of CheckStorage (tests).
	minFreeBytes uint64
	// failpoints are the storage faults of a -tags failpoints build (nil
	// otherwise); CheckStorage fails while the disk is "full".
	failpoints *failpoint.Points

	// raftConns is the raft port's pending-connection table (nil with an
	// in-memory transport); the gossip port's is gossip.conns.
	raftConns *connlimit.Limiter
	// gossip is nil when Config.GossipAddr is empty.
	gossip *gossip
	// left is set once Leave has started: the node no longer manages
	// membership or rejoins gossip.
	left atomic.Bool
	// leaving is set by Leave once this node has been removed, just
	// before it announces the departure in its gossip metadata.
	leaving atomic.Bool

	shutdownOnce sync.Once
	shutdownErr  error
}

// deps are the pieces New builds from Config; tests substitute in-memory
// ones to run several nodes in one process.
type deps struct {
	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore
	trans  raft.Transport
	// closers are closed on Shutdown after raft has stopped.
	closers []io.Closer
	// bootstrap, when non-empty, is the configuration written if the
	// stores hold no state yet.
	bootstrap []raft.Server
	// tune, if set, adjusts the raft config (tests shorten timeouts).
	tune func(*raft.Config)
	// dialRPC and registerRPC connect the internal RPC: dialRPC opens a
	// connection to a peer's RPC server, registerRPC installs this node's
	// handler for incoming ones. Both nil: no internal RPC.
	dialRPC     func(context.Context, raft.ServerAddress) (net.Conn, error)
	registerRPC func(handler func(net.Conn))
	// recheck closes the connections whose peer is no longer trusted.
	recheck func() int
	// tuneGossip, if set, adjusts the memberlist config (tests).
	tuneGossip func(*memberlist.Config)
	// raftConns is the pending-connection table of the raft listener,
	// reported in the node's metrics (nil: none).
	raftConns *connlimit.Limiter
	// failpoints, if set, are the faults the stores above are wrapped in.
	failpoints *failpoint.Points
}

// New opens the raft stores under cfg.DataDir, listens on cfg.RaftAddr and
// starts raft with f as its state machine. On the first start with
// BootstrapExpect == 1 it bootstraps a one-voter cluster; on later starts
// raft restores the latest snapshot into f and replays the log after it, so
// f must be freshly created (fsm.New) for every New.
//
// With GossipAddr set, New also starts gossip and returns while it joins
// Config.Join in the background; with BootstrapExpect > 1 the node then
// bootstraps together with the servers it finds, or is added by an
// existing cluster's leader (see membership.go).
//
// New returns once raft is running, usually before a leader is elected:
// Propose and ReadIndex wait (up to ApplyTimeout) for one.
func New(cfg *Config, f *fsm.FSM) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("%w: nil FSM", ErrInvalidConfig)
	}
	c := cfg.withDefaults()
	hl := newHCLogAdapter(c.Logger, "raft")

	raftDir := filepath.Join(c.DataDir, "raft")
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: create %s: %w", raftDir, err)
	}
	store, err := openLogStore(raftDir, hl)
	if err != nil {
		return nil, err
	}
	// Without -tags failpoints, fp is nil and its methods return the
	// stores unchanged.
	fp := failpoint.Open(c.DataDir, c.Logger)
	logs, err := raft.NewLogCache(logCacheSize, fp.LogStore(store))
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("cluster: create log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(raftDir, snapshotsRetained, hl.Named("snapshot"))
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("cluster: open snapshot store in %s: %w", raftDir, err)
	}
	stream, err := newTLSStreamLayer(c.RaftAddr, c.raftAdvertise(), c.TLS, c.Logger.With("component", "cluster", "node", c.NodeName),
		handshakeLimits{max: c.MaxPendingHandshakes, timeout: c.HandshakeTimeout, firstByte: c.FirstByteTimeout})
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	trans := pipelineTransport{raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: transportMaxPool,
		Timeout: transportTimeout,
		Logger:  hl.Named("transport"),
	})}

	d := deps{
		logs: logs, stable: fp.StableStore(store), snaps: fp.SnapshotStore(snaps), trans: trans, closers: []io.Closer{store},
		failpoints:  fp,
		dialRPC:     stream.dialRPC,
		registerRPC: func(h func(net.Conn)) { stream.rpc.Store(&h) },
		raftConns:   stream.pending,
		recheck:     stream.Recheck,
	}
	if c.BootstrapExpect == 1 {
		d.bootstrap = []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(c.NodeName), Address: trans.LocalAddr()}}
	}
	n, err := newNode(c, f, d)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return nil, err
	}
	return n, nil
}

// newNode starts raft on d. c must already carry its defaults. On error
// the caller still owns d's transport and closers.
func newNode(c *Config, f *fsm.FSM, d deps) (*Node, error) {
	if err := c.validateCommon(); err != nil {
		return nil, err
	}
	c = c.withDefaults()

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.NodeName)
	rc.Logger = newHCLogAdapter(c.Logger, "raft")
	rc.HeartbeatTimeout = raftHeartbeatTimeout
	rc.ElectionTimeout = raftElectionTimeout
	rc.LeaderLeaseTimeout = raftLeaderLeaseTimeout
	rc.BatchApplyCh = true // group commit: queued Applies share one StoreLogs and fsync
	rc.MaxAppendEntries = 256
	if c.CommitTimeout > 0 {
		rc.CommitTimeout = c.CommitTimeout
	}
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.NoSnapshotRestoreOnStart = false
	if d.tune != nil {
		d.tune(rc)
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: raft: %w", ErrInvalidConfig, err)
	}

	// Time the log appends and snapshot writes (metrics.go); everything
	// else passes through unchanged.
	metrics := newRaftMetrics()
	d.logs = &timedLogStore{LogStore: d.logs, h: metrics.fsync}
	d.snaps = &timedSnapshotStore{SnapshotStore: d.snaps, h: metrics.snapshot}

	if len(d.bootstrap) > 0 {
		has, err := raft.HasExistingState(d.logs, d.stable, d.snaps)
		if err != nil {
			return nil, fmt.Errorf("cluster: inspect raft state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: d.bootstrap}
			if err := raft.BootstrapCluster(rc, d.logs, d.stable, d.snaps, d.trans, conf); err != nil {
				return nil, fmt.Errorf("cluster: bootstrap: %w", err)
			}
		}
	}

	dataDir, err := loadDataDirID(d.stable)
	if err != nil {
		return nil, err
	}
	r, err := raft.NewRaft(rc, timedFSM{FSM: f, h: metrics.restore}, d.logs, d.stable, d.snaps, d.trans)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg:     c,
		fsm:     f,
		logs:    d.logs,
		raft:    r,
		trans:   d.trans,
		logger:  c.Logger.With("component", "cluster", "node", c.NodeName),
		closers: d.closers,
		obsCh:   make(chan raft.Observation, 16),
		ctx:     ctx,
		cancel:  cancel,
		stateCh: make(chan struct{}),
		dialRPC: d.dialRPC,
		dataDir: dataDir,
		metrics: metrics,

		failpoints: d.failpoints,
		raftConns:  d.raftConns,
		recheck:    d.recheck,
	}
	// Non-blocking: raft never waits for us. A dropped observation is
	// harmless because waiters re-read raft's state on every wake-up, and
	// a full buffer means a wake-up is already queued.
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(n.observer)
	n.contact = newRaftContact()
	contactCh := make(chan raft.Observation, contactBuffer)
	n.contactObserver = raft.NewObserver(contactCh, false, contactFilter)
	r.RegisterObserver(n.contactObserver)
	n.counterObserver = raft.NewObserver(nil, false, n.counters.count)
	r.RegisterObserver(n.counterObserver)

	n.local.kick = make(chan struct{}, 1)
	n.remote.kick = make(chan struct{}, 1)
	n.wg.Add(6)
	go n.sampleCommits()
	go n.watchLeadership()
	go n.watchContact(contactCh)
	go n.runRounds(&n.local, n.verifyRound)
	go n.runRounds(&n.remote, n.remoteRound)
	go n.runCompactor()
	if d.registerRPC != nil {
		d.registerRPC(n.serveRPC)
	}
	if c.GossipAddr != "" {
		if err := n.startGossip(d.tuneGossip); err != nil {
			n.stop()
			return nil, err
		}
		n.wg.Add(3)
		go n.bootstrapLoop()
		go n.reconcileLoop()
		go n.memberCheckLoop()
	}
	// After gossip: the refresh reads the members it knows.
	n.wg.Add(1)
	go n.refreshFormats()
	return n, nil
}

// stop ends the node's goroutines and raft without closing the transport
// or the stores (New's error path: the caller still owns them).
func (n *Node) stop() {
	n.cancel()
	_ = n.raft.Shutdown().Error()
	n.raft.DeregisterObserver(n.observer)
	n.raft.DeregisterObserver(n.contactObserver)
	n.raft.DeregisterObserver(n.counterObserver)
	n.rpcPool.close()
	if n.gossip != nil && n.gossip.ml != nil {
		_ = n.gossip.ml.Shutdown()
	}
	n.wg.Wait()
}

// Shutdown stops gossip (without a leave message: call Leave first for a
// graceful departure), stops raft, closes the transport and then the log
// store. Calls in flight return ErrShutdown. It is idempotent: later calls
// return the first call's result.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		n.cancel()
		var errs []error
		if n.gossip != nil {
			if err := n.gossip.ml.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("cluster: gossip shutdown: %w", err))
			}
		}
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: raft shutdown: %w", err))
		}
		n.raft.DeregisterObserver(n.observer)
		n.raft.DeregisterObserver(n.contactObserver)
		n.raft.DeregisterObserver(n.counterObserver)
		n.rpcPool.close()
		if c, ok := n.trans.(raft.WithClose); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("cluster: close transport: %w", err))
			}
		}
		n.wg.Wait()
		for _, c := range n.closers {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("cluster: close store: %w", err))
			}
		}
		n.shutdownErr = errors.Join(errs...)
		n.logger.Info("raft node shut down")
	})
	return n.shutdownErr
}

// IsLeader reports whether this node is the raft leader right now. It is a
// hint (leadership can end at any moment); writes and reads confirm it.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// LeaderTerm returns raft's current term and whether this node leads in
// it, so that work done once per leadership can tell a new term from the
// one it already served, even if leadership was lost and won back between
// two looks.
func (n *Node) LeaderTerm() (term uint64, leader bool) {
	term = n.raft.CurrentTerm()
	return term, n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term
}

// Leader returns the current leader's server ID and raft address, or empty
// strings when no leader is known.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// AppliedIndex is the local FSM's applied index: the newest revision this
// node can serve without waiting.
func (n *Node) AppliedIndex() uint64 { return n.fsm.AppliedIndex() }

// WaitApplied waits until the local FSM has applied index (and its
// listeners have seen it). It fails with ErrTimeout when ctx ends first and
// ErrShutdown when the node stops first, because a stopped node never
// applies anything again.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	ctx, cancel := n.bind(ctx)
	defer cancel()
	if err := n.fsm.WaitApplied(ctx, index); err != nil {
		return n.ctxErr(ctx)
	}
	return nil
}

// CheckRunning is the /livez check: raft has not shut down. It does not
// depend on a leader, because a node waiting out an election is alive and
// restarting it would not help.
func (n *Node) CheckRunning() error {
	if n.ctx.Err() != nil || n.raft.State() == raft.Shutdown {
		return ErrShutdown
	}
	return nil
}

// CheckLeader is the /livez-/readyz check that the cluster has a leader.
// When this node is the leader it also requires the term barrier to have
// applied, because until then it cannot serve linearizable reads.
func (n *Node) CheckLeader() error {
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ErrNoLeader
	}
	if id == raft.ServerID(n.cfg.NodeName) && !n.readReady() {
		return ErrNotReadReady
	}
	return nil
}

// CheckCaughtUp is the /readyz check that the local FSM is not far behind
// the log (see caughtUpSlack), so local reads are reasonably fresh and
// RV-bounded reads do not all wait.
func (n *Node) CheckCaughtUp() error {
	if n.ctx.Err() != nil {
		return ErrShutdown
	}
	commit, applied := n.raft.CommitIndex(), n.fsm.AppliedIndex()
	if commit > applied && commit-applied > caughtUpSlack {
		return fmt.Errorf("%w: applied index %d, commit index %d", ErrBehind, applied, commit)
	}
	return nil
}

// snapshot forces a raft snapshot (tests).
func (n *Node) snapshot() error { return n.raft.Snapshot().Error() }

// changed returns a channel closed at the next state change. Get it before
// checking the state, so a change between check and wait is not missed.
func (n *Node) changed() <-chan struct{} {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	return n.stateCh
}

func (n *Node) broadcast() {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	close(n.stateCh)
	n.stateCh = make(chan struct{})
}

// bind returns ctx, also cancelled (with cause ErrShutdown) when the node
// shuts down.
func (n *Node) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(n.ctx, func() { cancel(ErrShutdown) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// ctxErr translates the end of a bound context into this package's errors.
func (n *Node) ctxErr(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		return ErrShutdown
	}
	return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
}

// waitFuture waits for f, or for ctx to end (answered is then false).
// raft does not answer every future on shutdown (an Apply still queued when
// the leader loop exits is dropped), so no wait here may depend on it.
func waitFuture(ctx context.Context, f raft.Future) (answered bool, err error) {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return true, err
	case <-ctx.Done():
		return false, nil
	}
}

// waitFutures waits for each future of fs in turn, or for ctx to end, in
// one goroutine however many there are: raft answers the entries of one
// leader in log order. It returns their errors and how many of fs were
// answered (a prefix: all of them unless ctx ended first). No wait may
// depend on raft answering, as for waitFuture.
func waitFutures(ctx context.Context, fs []raft.ApplyFuture) (errs []error, answered int) {
	errs = make([]error, len(fs))
	var count atomic.Int64
	done := make(chan struct{})
	go func() {
		for i, f := range fs {
			errs[i] = f.Error()
			count.Store(int64(i + 1))
		}
		close(done)
	}()
	select {
	case <-done:
		return errs, len(fs)
	case <-ctx.Done():
		// errs[i] for i < count was written before count was stored;
		// the goroutine writes only later elements from here on.
		return errs, int(count.Load())
	}
}

// awaitChange waits for a membership change raft accepted, or for the node
// to shut down (ErrShutdown). raft answers a configuration change it took
// only when it commits or loses leadership, and its future has no shutdown
// channel, so a change in flight when raft stops can stay unanswered; the
// membership loops that wait on one must not keep Shutdown waiting for
// them.
func (n *Node) awaitChange(f raft.Future) error {
	answered, err := waitFuture(n.ctx, f)
	if !answered {
		return ErrShutdown
	}
	return err
}
