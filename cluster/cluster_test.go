package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"sync/atomic"

	"github.com/trustplane/trustplane/fsm"
)

// startTLSNode starts a single-node cluster on the real TLS transport.
func startTLSNode(t *testing.T, dir, addr string, f *fsm.FSM, opts ...func(*Config)) *Node {
	t.Helper()
	ca := newTestCA(t, "test-ca")
	cfg := DefaultConfig()
	cfg.NodeName = "node-a"
	cfg.DataDir = dir
	cfg.RaftAddr = addr
	cfg.TLS = tlsConfig(ca.nodeCert(t, "node-a"), ca)
	cfg.Logger = testLogger()
	for _, o := range opts {
		o(cfg)
	}
	n, err := New(cfg, f)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	return n
}

func TestSingleNode(t *testing.T) {
	ctx := testCtx(t)
	f := fsm.New()
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", f)

	var last uint64
	for i := range 5 {
		res, err := n.Propose(ctx, putCmd(fmt.Sprintf("cm-%d", i), "v"))
		if err != nil {
			t.Fatalf("Propose %d: %v", i, err)
		}
		if res.Err != nil {
			t.Fatalf("Propose %d: result error %v", i, res.Err)
		}
		if res.Revision <= last {
			t.Fatalf("revision %d not above previous %d", res.Revision, last)
		}
		if res.KV == nil || res.KV.ModRevision != res.Revision {
			t.Fatalf("KV %+v does not carry revision %d", res.KV, res.Revision)
		}
		last = res.Revision
	}
	if got := n.AppliedIndex(); got < last {
		t.Fatalf("AppliedIndex %d < last revision %d", got, last)
	}

	// A failed precondition is a result, not an error, and still uses an index.
	res, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: testKey("cm-0"), Value: []byte("x"), MustNotExist: true})
	if err != nil {
		t.Fatalf("Propose with failing precondition: %v", err)
	}
	if !errors.Is(res.Err, fsm.ErrExists) {
		t.Fatalf("Result.Err = %v, want fsm.ErrExists", res.Err)
	}
	if res.Revision <= last {
		t.Fatalf("failed command revision %d not above %d", res.Revision, last)
	}
	last = res.Revision

	idx, err := n.ReadIndex(ctx)
	if err != nil {
		t.Fatalf("ReadIndex: %v", err)
	}
	if idx < last {
		t.Fatalf("ReadIndex %d < last revision %d", idx, last)
	}
	if !n.IsLeader() {
		t.Error("single node is not leader")
	}
	if id, addr := n.Leader(); id != "node-a" || addr == "" {
		t.Errorf("Leader() = %q, %q", id, addr)
	}
	if err := n.CheckLeader(); err != nil {
		t.Errorf("CheckLeader: %v", err)
	}
	if err := n.CheckCaughtUp(); err != nil {
		t.Errorf("CheckCaughtUp: %v", err)
	}
}

func TestRestart(t *testing.T) {
	tests := []struct {
		name string
		// snapshot: take a snapshot between the two batches of writes and
		// keep only one log entry behind it, so the first batch can come
		// back only from the snapshot.
		snapshot bool
	}{
		{name: "log replay restores state"},
		{name: "snapshot plus log replay restores state", snapshot: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dir, addr := t.TempDir(), freeAddr(t)
			var opts []func(*Config)
			if tc.snapshot {
				opts = append(opts, func(c *Config) { c.TrailingLogs = 1 })
			}
			n := startTLSNode(t, dir, addr, fsm.New(), opts...)

			revs := map[string]uint64{}
			write := func(n *Node, name string) {
				res, err := n.Propose(ctx, putCmd(name, "value-"+name))
				if err != nil || res.Err != nil {
					t.Fatalf("Propose %s: %v %v", name, err, res)
				}
				revs[name] = res.Revision
			}
			write(n, "before-1")
			write(n, "before-2")
			if tc.snapshot {
				if err := n.snapshot(); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				snaps, _ := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*"))
				if len(snaps) == 0 {
					t.Fatal("no snapshot on disk")
				}
			}
			write(n, "after")
			last := revs["after"]
			if err := n.Shutdown(); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if err := n.Shutdown(); err != nil {
				t.Fatalf("second Shutdown: %v", err)
			}

			f := fsm.New()
			n2 := startTLSNode(t, dir, addr, f, opts...)
			if n2.dataDir == "" || n2.dataDir != n.dataDir {
				t.Fatalf("data directory identity %q after restart, was %q: a restart would look like a lost data directory", n2.dataDir, n.dataDir)
			}
			if tc.snapshot && n2.raft.Stats()["last_snapshot_index"] == "0" {
				t.Fatal("restarted node knows no snapshot")
			}
			if err := n2.WaitApplied(ctx, last); err != nil {
				t.Fatalf("WaitApplied(%d) after restart: %v", last, err)
			}
			if got := n2.AppliedIndex(); got < last {
				t.Fatalf("AppliedIndex %d < %d", got, last)
			}
			for name, rev := range revs {
				kv, _, err := f.Get(testKey(name), 0)
				if err != nil || kv == nil {
					t.Fatalf("Get %s after restart: %v, %v", name, kv, err)
				}
				if string(kv.Value) != "value-"+name || kv.ModRevision != rev {
					t.Fatalf("Get %s = %q@%d, want %q@%d", name, kv.Value, kv.ModRevision, "value-"+name, rev)
				}
			}
			res, err := n2.Propose(ctx, putCmd("restarted", "v"))
			if err != nil || res.Err != nil {
				t.Fatalf("Propose after restart: %v %v", err, res)
			}
			if res.Revision <= last {
				t.Fatalf("revision after restart %d not above %d", res.Revision, last)
			}
			if idx, err := n2.ReadIndex(ctx); err != nil || idx < res.Revision {
				t.Fatalf("ReadIndex after restart = %d, %v", idx, err)
			}
		})
	}
}

func TestReadIndexSharesRounds(t *testing.T) {
	ctx := testCtx(t)
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New())
	res, err := n.Propose(ctx, putCmd("x", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ReadIndex(ctx); err != nil { // the barrier has applied
		t.Fatal(err)
	}

	// Hold the rounds until every caller has joined one, so the test does
	// not depend on scheduling: at most maxRoundsInFlight rounds start and
	// wait, and one more pending round collects everyone else.
	release := make(chan struct{})
	hook := func() { <-release }
	n.roundHook.Store(&hook)
	const callers = 50
	roundsBefore, joinsBefore := n.local.rounds.Load(), n.local.joins.Load()

	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx, err := n.ReadIndex(ctx)
			if err == nil && idx < res.Revision {
				err = fmt.Errorf("index %d < acknowledged write %d", idx, res.Revision)
			}
			errs <- err
		}()
	}
	waitFor(t, "all callers to join a round", func() bool { return n.local.joins.Load()-joinsBefore == callers })
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ReadIndex: %v", err)
		}
	}
	rounds := n.local.rounds.Load() - roundsBefore
	if rounds == 0 || rounds > maxRoundsInFlight+1 {
		t.Fatalf("%d callers used %d rounds, want 1 to %d", callers, rounds, maxRoundsInFlight+1)
	}
}

// A caller must not be served by a round that captured the commit index
// before the caller arrived: it could miss a write acknowledged in between.
func TestReadIndexNeverReusesStartedRound(t *testing.T) {
	ctx := testCtx(t)
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New())
	if _, err := n.ReadIndex(ctx); err != nil {
		t.Fatal(err)
	}

	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func() {
		once.Do(func() { close(started) })
		<-release
	}
	n.roundHook.Store(&hook)
	joinsBefore := n.local.joins.Load()

	type result struct {
		idx uint64
		err error
	}
	a, b := make(chan result, 1), make(chan result, 1)
	go func() { idx, err := n.ReadIndex(ctx); a <- result{idx, err} }()
	<-started // round 1 has captured its commit index

	res, err := n.Propose(ctx, putCmd("w", "v"))
	if err != nil || res.Err != nil {
		t.Fatalf("Propose: %v %v", err, res)
	}
	go func() { idx, err := n.ReadIndex(ctx); b <- result{idx, err} }()
	waitFor(t, "second caller to join", func() bool { return n.local.joins.Load()-joinsBefore == 2 })
	close(release)

	ra, rb := <-a, <-b
	if ra.err != nil || rb.err != nil {
		t.Fatalf("ReadIndex errors: %v, %v", ra.err, rb.err)
	}
	if ra.idx >= res.Revision {
		t.Fatalf("first caller's round captured %d, expected it to predate write %d (test is not exercising the race)", ra.idx, res.Revision)
	}
	if rb.idx < res.Revision {
		t.Fatalf("second caller got %d, below the write %d acknowledged before it called", rb.idx, res.Revision)
	}
}

func TestInmemCluster(t *testing.T) {
	ctx := testCtx(t)
	c := newInmemCluster(t, 3, true)
	li := c.leader(t)
	leader := c.nodes[li]
	fi := (li + 1) % len(c.nodes)
	follower := c.nodes[fi]

	var last uint64
	for i := range 10 {
		res, err := leader.Propose(ctx, putCmd(fmt.Sprintf("cm-%d", i), "v"))
		if err != nil || res.Err != nil {
			t.Fatalf("Propose on leader: %v %v", err, res)
		}
		last = res.Revision
	}

	tests := []struct {
		name string
		call func() error
	}{
		{"Propose on a follower is refused", func() error {
			_, err := follower.Propose(ctx, putCmd("from-follower", "v"))
			return err
		}},
		{"ReadIndex on a follower is refused", func() error {
			_, err := follower.ReadIndex(ctx)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("got %v, want ErrNotLeader", err)
			}
		})
	}

	idx, err := leader.ReadIndex(ctx)
	if err != nil || idx < last {
		t.Fatalf("leader ReadIndex = %d, %v; want >= %d", idx, err, last)
	}
	want := leader.AppliedIndex()
	for i, n := range c.nodes {
		if err := n.WaitApplied(ctx, want); err != nil {
			t.Fatalf("node %d WaitApplied(%d): %v", i, want, err)
		}
		if got := n.AppliedIndex(); got != want {
			t.Errorf("node %d applied %d, leader applied %d", i, got, want)
		}
		if kv, _, err := c.fsms[i].Get(testKey("cm-9"), 0); err != nil || kv == nil || kv.ModRevision != last {
			t.Errorf("node %d Get = %+v, %v", i, kv, err)
		}
		if err := n.CheckLeader(); err != nil {
			t.Errorf("node %d CheckLeader: %v", i, err)
		}
		if err := n.CheckCaughtUp(); err != nil {
			t.Errorf("node %d CheckCaughtUp: %v", i, err)
		}
	}
	if _, err := c.nodes[fi].Propose(ctx, &fsm.Command{Op: fsm.OpNoop}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower Propose: %v", err)
	}
}

func TestNoLeader(t *testing.T) {
	// A node that never bootstraps never sees a leader.
	c := newInmemCluster(t, 1, false, func(c *Config) { c.ApplyTimeout = 50 * time.Millisecond })
	n := c.nodes[0]
	ctx := testCtx(t)

	if _, err := n.Propose(ctx, putCmd("x", "v")); !errors.Is(err, ErrNoLeader) {
		t.Errorf("Propose: got %v, want ErrNoLeader", err)
	}
	if _, err := n.ReadIndex(ctx); !errors.Is(err, ErrNoLeader) {
		t.Errorf("ReadIndex: got %v, want ErrNoLeader", err)
	}
	if err := n.CheckLeader(); !errors.Is(err, ErrNoLeader) {
		t.Errorf("CheckLeader: got %v, want ErrNoLeader", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := n.Propose(cctx, putCmd("x", "v")); !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Errorf("Propose with ended context: got %v, want ErrTimeout wrapping context.Canceled", err)
	}
}

func TestShutdown(t *testing.T) {
	ctx := testCtx(t)
	c := newInmemCluster(t, 1, true)
	n := c.nodes[c.leader(t)]
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"Propose", func() error { _, err := n.Propose(ctx, putCmd("x", "v")); return err }},
		{"ReadIndex", func() error { _, err := n.ReadIndex(ctx); return err }},
		{"WaitApplied on a future index", func() error { return n.WaitApplied(ctx, n.AppliedIndex()+1) }},
		{"CheckLeader", n.CheckLeader},
		{"CheckCaughtUp", n.CheckCaughtUp},
	}
	for _, tc := range tests {
		t.Run(tc.name+" after Shutdown fails with ErrShutdown", func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrShutdown) {
				t.Fatalf("got %v, want ErrShutdown", err)
			}
		})
	}
	if err := n.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

func TestShutdownUnblocksWaiters(t *testing.T) {
	c := newInmemCluster(t, 1, true)
	n := c.nodes[c.leader(t)]
	done := make(chan error, 1)
	go func() { done <- n.WaitApplied(context.Background(), n.AppliedIndex()+1000) }()
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrShutdown) {
		t.Fatalf("WaitApplied: got %v, want ErrShutdown", err)
	}
}

// gossipOn turns on gossip with bootstrap-expect 3.
func gossipOn(c *Config) {
	c.GossipAddr = "127.0.0.1:6445"
	c.GossipKey = make([]byte, 32)
	c.Join = []string{"127.0.0.1:7445"}
	c.BootstrapExpect = 3
	c.APIAddr = "127.0.0.1:6443"
	c.ClusterID = strings.Repeat("f", 64)
}

func TestConfigValidate(t *testing.T) {
	ca := newTestCA(t, "ca")
	good := func() *Config {
		c := DefaultConfig()
		c.NodeName = "n"
		c.DataDir = "/tmp/x"
		c.RaftAddr = "127.0.0.1:6444"
		c.TLS = tlsConfig(ca.nodeCert(t, "n"), ca)
		return c
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"default config with identity is valid", func(*Config) {}, true},
		{"zero tunables mean defaults", func(c *Config) {
			c.ApplyTimeout, c.SnapshotThreshold, c.SnapshotInterval, c.TrailingLogs, c.Logger = 0, 0, 0, 0, nil
		}, true},
		{"host name address is valid", func(c *Config) { c.RaftAddr = "node-0.trustplane:6444" }, true},
		{"NodeName is required", func(c *Config) { c.NodeName = "" }, false},
		{"DataDir is required", func(c *Config) { c.DataDir = "" }, false},
		{"RaftAddr needs a port", func(c *Config) { c.RaftAddr = "127.0.0.1" }, false},
		{"RaftAddr needs a host", func(c *Config) { c.RaftAddr = ":6444" }, false},
		{"unspecified address cannot be advertised", func(c *Config) { c.RaftAddr = "0.0.0.0:6444" }, false},
		{"unspecified address with RaftAdvertise is valid", func(c *Config) { c.RaftAddr, c.RaftAdvertise = "0.0.0.0:6444", "10.0.0.5:6444" }, true},
		{"RaftAdvertise may be a host name", func(c *Config) { c.RaftAddr, c.RaftAdvertise = "0.0.0.0:6444", "node-0.trustplane:6444" }, true},
		{"RaftAdvertise must not be unspecified", func(c *Config) { c.RaftAddr, c.RaftAdvertise = "0.0.0.0:6444", "0.0.0.0:6444" }, false},
		{"RaftAdvertise needs a real port", func(c *Config) { c.RaftAddr, c.RaftAdvertise = "0.0.0.0:6444", "10.0.0.5:0" }, false},
		{"port 0 only for a single node", func(c *Config) { c.RaftAddr = "127.0.0.1:0"; c.BootstrapExpect = 3 }, false},
		{"TLS is required", func(c *Config) { c.TLS = nil }, false},
		{"TLS needs a certificate", func(c *Config) { c.TLS.Certificates = nil }, false},
		{"TLS needs a CA pool", func(c *Config) { c.TLS.RootCAs, c.TLS.ClientCAs = nil, nil }, false},
		{"negative BootstrapExpect", func(c *Config) { c.BootstrapExpect = -1 }, false},
		{"negative ApplyTimeout", func(c *Config) { c.ApplyTimeout = -time.Second }, false},
		{"gossip with a 32-byte key and expect 3 is valid", gossipOn, true},
		{"negative DeadServerTimeout disables autopilot", func(c *Config) { gossipOn(c); c.DeadServerTimeout = -1 }, true},
		{"BootstrapExpect above 1 needs gossip", func(c *Config) { c.BootstrapExpect = 3 }, false},
		{"Join needs gossip", func(c *Config) { c.Join = []string{"127.0.0.1:6445"} }, false},
		{"gossip needs a key", func(c *Config) { gossipOn(c); c.GossipKey = nil }, false},
		{"gossip key must be 32 bytes", func(c *Config) { gossipOn(c); c.GossipKey = make([]byte, 16) }, false},
		{"GossipAddr needs a port", func(c *Config) { gossipOn(c); c.GossipAddr = "127.0.0.1" }, false},
		{"GossipAddr must be an IP", func(c *Config) { gossipOn(c); c.GossipAddr = "node-0:6445" }, false},
		{"unspecified GossipAddr cannot be advertised", func(c *Config) { gossipOn(c); c.GossipAddr = "0.0.0.0:6445" }, false},
		{"unspecified GossipAddr with GossipAdvertise is valid", func(c *Config) {
			gossipOn(c)
			c.GossipAddr, c.GossipAdvertise = "0.0.0.0:6445", "10.0.0.5:6445"
		}, true},
		{"GossipAdvertise must be an IP", func(c *Config) {
			gossipOn(c)
			c.GossipAddr, c.GossipAdvertise = "0.0.0.0:6445", "node-0:6445"
		}, false},
		{"Join entries need a port", func(c *Config) { gossipOn(c); c.Join = []string{"127.0.0.1"} }, false},
		{"metadata must fit 512 bytes", func(c *Config) { gossipOn(c); c.APIAddr = strings.Repeat("a", 600) + ":6443" }, false},
		{"every gossip label mode is valid", func(c *Config) { gossipOn(c); c.GossipLabel = GossipLabelRequire }, true},
		{"an unknown gossip label mode", func(c *Config) { gossipOn(c); c.GossipLabel = "sometimes" }, false},
		{"negative FirstByteTimeout", func(c *Config) { c.FirstByteTimeout = -time.Second }, false},
		{"negative MaxGossipStreams", func(c *Config) { c.MaxGossipStreams = -1 }, false},
		{"FirstByteTimeout longer than HandshakeTimeout", func(c *Config) { c.FirstByteTimeout = time.Minute }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mutate(c)
			err := c.Validate()
			if tc.ok && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestDataDirLockedByAnotherNode(t *testing.T) {
	dir := t.TempDir()
	startTLSNode(t, dir, "127.0.0.1:0", fsm.New())
	ca := newTestCA(t, "ca")
	cfg := DefaultConfig()
	cfg.NodeName, cfg.DataDir, cfg.RaftAddr = "node-a", dir, "127.0.0.1:0"
	cfg.TLS = tlsConfig(ca.nodeCert(t, "node-a"), ca)
	cfg.Logger = testLogger()
	if n, err := New(cfg, fsm.New()); err == nil {
		_ = n.Shutdown()
		t.Fatal("second node on the same data directory started")
	}
	if _, err := os.Stat(filepath.Join(dir, "raft", walDirName)); err != nil {
		t.Fatal(err)
	}
}

// Shutdown closes the transport through raft.WithClose; the in-memory one
// used by tests must satisfy it too.
var _ raft.WithClose = (*raft.InmemTransport)(nil)

func TestCheckStorage(t *testing.T) {
	dir := t.TempDir()
	n := startTLSNode(t, dir, "127.0.0.1:0", fsm.New())
	if err := n.CheckStorage(); err != nil {
		t.Fatalf("a fresh data directory: %v", err)
	}
	// A disk without room for the floor fails the check.
	n.minFreeBytes = 1 << 62
	if err := n.CheckStorage(); !errors.Is(err, ErrStorage) {
		t.Fatalf("a full disk: %v, want ErrStorage", err)
	}
	n.minFreeBytes = 0
	// A data directory the node can no longer use fails it too.
	if err := os.Rename(filepath.Join(dir, "raft"), filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(filepath.Join(dir, "gone"), filepath.Join(dir, "raft"))
	if err := n.CheckStorage(); !errors.Is(err, ErrStorage) {
		t.Fatalf("a missing data directory: %v, want ErrStorage", err)
	}
}

// TestCompactorBoundsHistory: the leader compacts history older than the
// retention through the log, so old revisions become unreadable (410 to a
// client) while the current state stays.
func TestCompactorBoundsHistory(t *testing.T) {
	ctx := testCtx(t)
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.CompactInterval = 20 * time.Millisecond
		c.CompactRetention = 60 * time.Millisecond
	})
	first, err := n.Propose(ctx, putCmd("x", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := n.Propose(ctx, putCmd("x", "v2"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "compaction past the first write", func() bool { return n.fsm.CompactedRevision() >= second.Revision })
	if _, _, err := n.fsm.Get(testKey("x"), first.Revision); !errors.Is(err, fsm.ErrCompacted) {
		t.Fatalf("Get at a compacted revision: %v, want ErrCompacted", err)
	}
	kv, _, err := n.fsm.Get(testKey("x"), 0)
	if err != nil || kv == nil || string(kv.Value) != "v2" {
		t.Fatalf("current value after compaction: %+v, %v", kv, err)
	}
}

// TestCompactorBoundsHistoryBytes: with compaction by age off, history past
// CompactMaxBytes is compacted through the log down to three quarters of
// the bound, keeping the newest versions and the current state.
func TestCompactorBoundsHistoryBytes(t *testing.T) {
	ctx := testCtx(t)
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.CompactInterval = 20 * time.Millisecond
		c.CompactRetention = -1
		c.CompactMaxBytes = 1000
	})
	var revs []uint64
	for i := range 6 {
		r, err := n.Propose(ctx, putCmd("x", strings.Repeat(fmt.Sprint(i), 400)))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Revision)
	}
	// 5 superseded values of 400 bytes: 2000 > 1000. A compaction may
	// also have run between the writes; either way the history ends within
	// the bound, and the newest superseded value (three quarters of the
	// bound hold one) and the current value stay.
	waitFor(t, "compaction by size", func() bool {
		return n.fsm.HistoryBytes() <= 1000 && n.fsm.CompactedRevision() > revs[1]
	})
	kv, _, err := n.fsm.Get(testKey("x"), revs[4])
	if err != nil || kv == nil || kv.Value[0] != '4' {
		t.Fatalf("the newest history is gone: %+v, %v", kv, err)
	}
	kv, _, err = n.fsm.Get(testKey("x"), 0)
	if err != nil || kv == nil || kv.Value[0] != '5' {
		t.Fatalf("current value after compaction: %+v, %v", kv, err)
	}
}

// failingLogs is a log store whose writes fail while fail is set, like a
// full or broken disk.
type failingLogs struct {
	raft.LogStore
	fail atomic.Bool
}

var errDiskFull = errors.New("no space left on device")

func (f *failingLogs) StoreLog(l *raft.Log) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.LogStore.StoreLog(l)
}

func (f *failingLogs) StoreLogs(ls []*raft.Log) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.LogStore.StoreLogs(ls)
}

// TestUnpersistedWritesAreNeverAcknowledged: while the log cannot be
// written, Propose fails and nothing is applied; once the disk works again,
// writes resume.
func TestUnpersistedWritesAreNeverAcknowledged(t *testing.T) {
	ctx := testCtx(t)
	addr, tr := raft.NewInmemTransport("inmem-disk")
	store := raft.NewInmemStore()
	logs := &failingLogs{LogStore: store}
	cfg := DefaultConfig()
	cfg.NodeName = "disk"
	cfg.DataDir = t.TempDir()
	cfg.Logger = testLogger()
	cfg.ApplyTimeout = 2 * time.Second
	f := fsm.New()
	n, err := newNode(cfg, f, deps{
		logs: logs, stable: store, snaps: raft.NewInmemSnapshotStore(), trans: tr, tune: fastRaft,
		bootstrap: []raft.Server{{Suffrage: raft.Voter, ID: "disk", Address: addr}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	if _, err := n.Propose(ctx, putCmd("before", "v")); err != nil {
		t.Fatal(err)
	}

	logs.fail.Store(true)
	for i := 0; i < 3; i++ {
		res, err := n.Propose(ctx, putCmd(fmt.Sprintf("lost-%d", i), "v"))
		if err == nil {
			t.Fatalf("write %d was acknowledged (revision %d) while the log could not be written", i, res.Revision)
		}
	}
	for i := 0; i < 3; i++ {
		if kv, _, _ := f.Get(testKey(fmt.Sprintf("lost-%d", i)), 0); kv != nil {
			t.Fatalf("an unpersisted write was applied: %+v", kv)
		}
	}

	logs.fail.Store(false)
	waitFor(t, "writes to resume once the disk works", func() bool {
		_, err := n.Propose(ctx, putCmd("after", "v"))
		return err == nil
	})
}

// TestCompactorExpiresIdleRevision: on a cluster that writes nothing more,
// the newest revision (what a list or a continue token carries) is still
// compacted once the retention has passed: the leader's OpNoop supersedes
// it, as kube-apiserver's compactor's own etcd write does.
func TestCompactorExpiresIdleRevision(t *testing.T) {
	ctx := testCtx(t)
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.CompactInterval = 20 * time.Millisecond
		c.CompactRetention = 60 * time.Millisecond
	})
	last, err := n.Propose(ctx, putCmd("x", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "compaction past the last write", func() bool { return n.fsm.CompactedRevision() > last.Revision })
	if _, _, err := n.fsm.Get(testKey("x"), last.Revision); !errors.Is(err, fsm.ErrCompacted) {
		t.Fatalf("Get at the idle cluster's old revision: %v, want ErrCompacted", err)
	}
	kv, _, err := n.fsm.Get(testKey("x"), 0)
	if err != nil || kv == nil || string(kv.Value) != "v1" {
		t.Fatalf("current value: %+v, %v", kv, err)
	}
}
