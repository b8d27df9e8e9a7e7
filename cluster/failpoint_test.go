//go:build failpoints

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/failpoint"
)

// These tests need a failpoints build: go test -tags failpoints ./cluster/...
// They run a three-node in-memory cluster whose stores are wrapped in each
// node's failpoints, and turn faults on and off by writing the nodes' files,
// as the chaos tool does with real processes.

// newFailpointCluster is newInmemCluster (bootstrapped) with every node's
// stores wrapped in the failpoints of its data directory.
func newFailpointCluster(t *testing.T, n int) *inmemCluster {
	t.Helper()
	var (
		addrs  []raft.ServerAddress
		transs []*raft.InmemTransport
		conf   []raft.Server
	)
	for i := range n {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("inmem-%d", i)))
		addrs = append(addrs, addr)
		transs = append(transs, tr)
		conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("node-%d", i)), Address: addr})
	}
	for i, a := range transs {
		for j, b := range transs {
			if i != j {
				a.Connect(addrs[j], b)
			}
		}
	}
	c := &inmemCluster{}
	for i := range n {
		cfg := DefaultConfig()
		cfg.NodeName = fmt.Sprintf("node-%d", i)
		cfg.DataDir = t.TempDir()
		cfg.Logger = testLogger()
		// CheckStorage also wants <data-dir>/raft/wal, which the
		// in-memory stores do not create.
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, "raft", walDirName), 0o700); err != nil {
			t.Fatal(err)
		}
		fp := failpoint.Open(cfg.DataDir, cfg.Logger)
		store := raft.NewInmemStore()
		// The same layering as New: the cache in front of the
		// failpoints in front of the store.
		logs, err := raft.NewLogCache(logCacheSize, fp.LogStore(store))
		if err != nil {
			t.Fatal(err)
		}
		d := deps{
			logs:       logs,
			stable:     fp.StableStore(store),
			snaps:      fp.SnapshotStore(raft.NewInmemSnapshotStore()),
			trans:      transs[i],
			tune:       fastRaft,
			bootstrap:  conf,
			failpoints: fp,
		}
		f := fsm.New()
		node, err := newNode(cfg, f, d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Shutdown() })
		c.nodes = append(c.nodes, node)
		c.fsms = append(c.fsms, f)
	}
	return c
}

// setFailpoints replaces node i's failpoint file (atomically, by rename)
// and waits until the node's CheckStorage agrees with it.
func (c *inmemCluster) setFailpoints(t *testing.T, i int, st failpoint.State) {
	t.Helper()
	setFailpoints(t, c.nodes[i], st)
}

// setFailpoints is inmemCluster.setFailpoints for any node.
func setFailpoints(t *testing.T, n *Node, st failpoint.State) {
	t.Helper()
	dir := n.cfg.DataDir
	tmp := filepath.Join(dir, failpoint.FileName+".tmp")
	if err := os.WriteFile(tmp, st.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, failpoint.FileName)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("%s to read %v", n.cfg.NodeName, st), func() bool {
		return n.failpoints.State() == st
	})
	if full := st.DiskFull || st.DiskFullStable; (n.CheckStorage() != nil) != full {
		t.Fatalf("%s with %v: CheckStorage %v", n.cfg.NodeName, st, n.CheckStorage())
	}
}

// has reports whether node i has applied the put of name with value.
func (c *inmemCluster) has(i int, name, value string) bool {
	kv, _, err := c.fsms[i].Get(testKey(name), 0)
	return err == nil && kv != nil && bytes.Equal(kv.Value, []byte(value))
}

// proposeAnywhere proposes cmd on whichever node is leader, trying again
// (bounded) while there is none. It returns the node that acknowledged it.
func (c *inmemCluster) proposeAnywhere(t *testing.T, cmd *fsm.Command) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 0; ; attempt++ {
		if time.Now().After(deadline) || attempt > 2000 {
			t.Fatalf("no node acknowledged %s", cmd.Key.Name)
		}
		for i, n := range c.nodes {
			if !n.IsLeader() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := n.Propose(ctx, cmd)
			cancel()
			if err == nil {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailpointDiskFullLeader: a leader whose disk is full cannot append,
// so it acknowledges nothing and steps down (raft's dispatchLogs); the
// others elect a leader and keep serving; once the disk has room the node
// catches up, and every acknowledged write is on every node.
func TestFailpointDiskFullLeader(t *testing.T) {
	c := newFailpointCluster(t, 3)
	sick := c.leader(t)
	acked := map[string]string{}
	for i := range 3 {
		name, val := fmt.Sprintf("before-%d", i), fmt.Sprintf("v%d", i)
		if _, err := c.nodes[sick].Propose(testCtx(t), putCmd(name, val)); err != nil {
			t.Fatal(err)
		}
		acked[name] = val
	}

	c.setFailpoints(t, sick, failpoint.State{DiskFull: true})
	if err := c.nodes[sick].CheckStorage(); !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("CheckStorage on the full node: %v, want ErrStorage with ENOSPC", err)
	}

	// Writes sent to the full node are never acknowledged by it.
	var refused []string
	for i := range 5 {
		name := fmt.Sprintf("refused-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := c.nodes[sick].Propose(ctx, putCmd(name, "x"))
		cancel()
		if err == nil {
			t.Fatalf("the node with a full disk acknowledged %s", name)
		}
		t.Logf("propose on the full node: %v", err)
		refused = append(refused, name)
	}

	// The cluster keeps serving, led by a node that can write. (The full
	// node may win an election again, and steps down at its first append.)
	for i := range 5 {
		name, val := fmt.Sprintf("during-%d", i), fmt.Sprintf("d%d", i)
		if by := c.proposeAnywhere(t, putCmd(name, val)); by == sick {
			t.Fatalf("the node with a full disk acknowledged %s", name)
		}
		acked[name] = val
	}
	for name, val := range acked {
		if strings.HasPrefix(name, "during-") && c.has(sick, name, val) {
			t.Fatalf("the node with a full disk applied %s, which it cannot have stored", name)
		}
	}

	c.setFailpoints(t, sick, failpoint.State{})
	for i := range 3 {
		name, val := fmt.Sprintf("after-%d", i), fmt.Sprintf("a%d", i)
		c.proposeAnywhere(t, putCmd(name, val))
		acked[name] = val
	}
	for i := range c.nodes {
		waitFor(t, fmt.Sprintf("node-%d to apply every acknowledged write", i), func() bool {
			for name, val := range acked {
				if !c.has(i, name, val) {
					return false
				}
			}
			return true
		})
		for _, name := range refused {
			if kv, _, _ := c.fsms[i].Get(testKey(name), 0); kv != nil {
				t.Errorf("node-%d applied %s, which the full leader refused", i, name)
			}
		}
	}
}

// TestFailpointDiskFullFollower: a follower whose disk is full rejects
// appends; the leader and the other follower are a quorum and keep
// acknowledging writes. Once the disk has room the follower catches up.
func TestFailpointDiskFullFollower(t *testing.T) {
	c := newFailpointCluster(t, 3)
	li := c.leader(t)
	sick := (li + 1) % 3
	c.setFailpoints(t, sick, failpoint.State{DiskFull: true})

	acked := map[string]string{}
	for i := range 10 {
		name, val := fmt.Sprintf("cm-%d", i), fmt.Sprintf("v%d", i)
		if _, err := c.nodes[li].Propose(testCtx(t), putCmd(name, val)); err != nil {
			t.Fatalf("write %d with a follower's disk full: %v", i, err)
		}
		acked[name] = val
	}
	if !c.nodes[li].IsLeader() {
		t.Fatal("the leader lost leadership over a follower's full disk")
	}
	for name, val := range acked {
		if c.has(sick, name, val) {
			t.Fatalf("the follower with a full disk applied %s, which it cannot have stored", name)
		}
	}

	c.setFailpoints(t, sick, failpoint.State{})
	waitFor(t, "the follower to catch up", func() bool {
		for name, val := range acked {
			if !c.has(sick, name, val) {
				return false
			}
		}
		return true
	})
}

// TestFailpointFsyncDelay: with a slow disk on the leader, a write takes at
// least the delay (a lower bound only: a busy machine can only add to it),
// and still succeeds.
func TestFailpointFsyncDelay(t *testing.T) {
	c := newFailpointCluster(t, 3)
	li := c.leader(t)
	const delay = 150 * time.Millisecond
	c.setFailpoints(t, li, failpoint.State{FsyncDelay: delay})
	start := time.Now()
	if _, err := c.nodes[li].Propose(testCtx(t), putCmd("slow", "v")); err != nil {
		// Heartbeats do not wait for the leader's disk, so the slow
		// append must not cost leadership.
		t.Fatalf("write on a slow disk: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("a write on the slow leader took %s, want at least %s", took, delay)
	}
}

// TestFailpointDiskFullStableCrashes checks what doc.go claims for
// disk-full-stable: hashicorp/raft panics when it cannot save a new term,
// so the node whose stable store is full dies at its next term change. The
// crash would take the test binary with it, so the cluster runs in a child
// process (this test binary, re-run with an environment variable).
func TestFailpointDiskFullStableCrashes(t *testing.T) {
	if os.Getenv("TRUSTPLANE_FAILPOINT_CHILD") == "1" {
		c := newFailpointCluster(t, 3)
		li := c.leader(t)
		c.setFailpoints(t, li, failpoint.State{DiskFullStable: true})
		// The leader steps down at its next append, then a term change
		// must panic; the cluster's writes provoke both.
		for i := range 200 {
			for _, n := range c.nodes {
				if n.IsLeader() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, _ = n.Propose(ctx, putCmd(fmt.Sprintf("cm-%d", i), "v"))
					cancel()
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		return // no crash: the parent fails
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFailpointDiskFullStableCrashes$", "-test.count=1")
	// The child's crash skips its own cleanup: its temporary directories
	// go under the parent's, which the parent removes.
	cmd.Env = append(os.Environ(), "TRUSTPLANE_FAILPOINT_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the node with a full stable store did not crash:\n%s", out)
	}
	if !strings.Contains(string(out), "failed to save current term") || !strings.Contains(string(out), "no space left on device") {
		t.Fatalf("the child failed, but not with raft's term panic (%v):\n%s", err, out)
	}
}

// TestFailpointRefusedPipelineOverTCP: a follower whose disk fills for a
// moment refuses the leader's pipelined appends; once it has room again
// it catches up while the writes go on, round after round. Over raft's
// network transport unwrapped, each refusal wedged the leader's
// replication to the follower at even odds until the leader changed
// (pipelineTransport), so eight rounds all but always meet it.
func TestFailpointRefusedPipelineOverTCP(t *testing.T) {
	c := newTCPCluster(t, 3)
	nodes := c.startAll()
	l := tcpLeader(t, nodes...)
	var f *Node
	for _, n := range nodes {
		if n != l {
			f = n
			break
		}
	}

	// Writers keep the leader's replication busy, so that the follower's
	// failed append arrives in a full pipeline with more sends ready.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked atomic.Uint64
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, n := range nodes {
					if !n.IsLeader() {
						continue
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					res, err := n.Propose(ctx, putCmd(fmt.Sprintf("w%d-%d", w, i), "v"))
					cancel()
					if err == nil && res.Err == nil {
						for {
							old := acked.Load()
							if res.Revision <= old || acked.CompareAndSwap(old, res.Revision) {
								break
							}
						}
					}
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	for round := range 8 {
		from := acked.Load()
		setFailpoints(t, f, failpoint.State{DiskFull: true})
		// Long enough for several appends to reach the full disk.
		waitFor(t, "writes acknowledged while the follower's disk is full", func() bool { return acked.Load() >= from+50 })
		setFailpoints(t, f, failpoint.State{})
		target := acked.Load()
		waitFor(t, fmt.Sprintf("round %d: %s to apply %d once its disk has room (applied %d)", round, f.cfg.NodeName, target, f.AppliedIndex()),
			func() bool { return f.AppliedIndex() >= target })
	}
	i := slices.Index(nodes, f)
	if !c.logs[i].Contains("no space left on device") {
		t.Fatalf("%s never refused an append: the disk-full failpoint was not met", f.cfg.NodeName)
	}
}
