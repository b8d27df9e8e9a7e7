package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// submitCluster starts three voters bootstrapped together, each reading
// reads (Config.Formats) and having found the cluster's versions, and returns
// the leader and a follower.
func submitCluster(t *testing.T, reads map[string]Reads) (c *haCluster, l, f *haNode) {
	c = newHACluster(t)
	var conf []raft.Server
	for i := range 3 {
		name := fmt.Sprintf("node-%d", i)
		conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress("inmem-" + name)})
	}
	for _, s := range conf {
		c.add(string(s.ID), haOpts{bootstrap: conf, mutate: func(cfg *Config) { cfg.Formats = reads }})
	}
	l = c.leader()
	// Each node finds the cluster's versions once, as its refresh would.
	ctx := testCtx(t)
	for _, n := range c.nodes {
		fs, err := n.node.ClusterFormats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n.node.setFormats(fs)
		if n != l && f == nil {
			f = n
		}
	}
	return c, l, f
}

// TestSubmit: a follower has the leader propose a command it built; the
// answer is the fsm's own result, applied on the follower before Submit
// returns; failed preconditions come back as the fsm's verdicts; the
// leader proposes only API objects for others.
func TestSubmit(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("internal RPC version %d", v), func(t *testing.T) { testSubmit(t, v) })
	}
}

// testSubmit is TestSubmit with every node reading internal RPC versions
// 1 to version, so that the proposals go as JSON (1) or binary frames (2).
func testSubmit(t *testing.T, version int) {
	ctx := testCtx(t)
	c, l, f := submitCluster(t, map[string]Reads{FormatRPC: {1, version}})
	if got := f.node.clusterVersion(FormatRPC); got != version {
		t.Fatalf("the cluster writes internal-rpc %d, want %d", got, version)
	}

	t.Run("a follower's write applies everywhere", func(t *testing.T) {
		res, err := f.node.Submit(ctx, putCmd("a", "1"))
		if err != nil || res.Err != nil {
			t.Fatalf("Submit: %v %+v", err, res)
		}
		if err := f.node.WaitApplied(ctx, res.Revision); err != nil {
			t.Fatal(err)
		}
		if kv, _, _ := f.fsm.Get(testKey("a"), 0); kv == nil || kv.ModRevision != res.Revision || string(kv.Value) != "1" {
			t.Fatalf("the follower holds %+v, want revision %d", kv, res.Revision)
		}
		if kv, _, _ := l.fsm.Get(testKey("a"), 0); kv == nil || kv.ModRevision != res.Revision {
			t.Fatalf("the leader holds %+v, want revision %d", kv, res.Revision)
		}
	})

	t.Run("preconditions are judged by the leader", func(t *testing.T) {
		res, err := f.node.Submit(ctx, putCmd("a", "2")) // MustNotExist is unset: an update
		if err != nil || res.Err != nil {
			t.Fatal(err, res)
		}
		for _, tc := range []struct {
			name string
			cmd  *fsm.Command
			want error
		}{
			{"exists", &fsm.Command{Op: fsm.OpPut, Key: testKey("a"), Value: []byte("x"), MustNotExist: true}, fsm.ErrExists},
			{"stale revision", &fsm.Command{Op: fsm.OpPut, Key: testKey("a"), Value: []byte("x"), ModRevision: res.Revision - 1}, fsm.ErrModRevisionMismatch},
			{"gone", &fsm.Command{Op: fsm.OpDelete, Key: testKey("none")}, fsm.ErrNotFound},
		} {
			got, err := f.node.Submit(ctx, tc.cmd)
			if err != nil || !errors.Is(got.Err, tc.want) {
				t.Fatalf("%s: %v %+v, want verdict %v", tc.name, err, got, tc.want)
			}
			if f.node.AppliedIndex() < got.Revision {
				t.Fatalf("%s: answered before applying the verdict's entry", tc.name)
			}
		}
	})

	t.Run("only API objects", func(t *testing.T) {
		refused := []*fsm.Command{
			{Op: fsm.OpPut, Key: fsm.Key{Space: fsm.SpaceInternal, Resource: "signingkeys", Name: "k"}, Value: []byte("x")},
			{Op: fsm.OpCompact, CompactRevision: 1},
			{Op: fsm.OpNoop},
		}
		for _, cmd := range refused {
			if _, err := f.node.Submit(ctx, cmd); !errors.Is(err, ErrNotPermitted) {
				t.Fatalf("Submit %s %v: %v, want ErrNotPermitted", cmd.Op, cmd.Key, err)
			}
		}
		// The leader refuses them too, sent as another build might, in
		// one frame with garbage and a command it takes: each is
		// answered on its own.
		frame := [][]byte{}
		for _, cmd := range refused {
			frame = append(frame, cmd.Encode())
		}
		frame = append(frame, []byte{0xff, 0x01, 0x02}, putCmd("beside-the-refused", "v").Encode())
		resp, err := f.node.call(ctx, l.addr, rpcRequest{Op: opPropose, Commands: frame})
		if err != nil || len(resp.Proposals) != len(frame) {
			t.Fatalf("the leader answered %+v %v", resp, err)
		}
		for i, want := range []string{"not_permitted", "not_permitted", "not_permitted", "bad_request", ""} {
			if got := resp.Proposals[i]; got.Code != want || (want == "") != (got.Index > 0) {
				t.Fatalf("proposal %d: %+v, want code %q", i, got, want)
			}
		}
		if kv, _, _ := l.fsm.Get(fsm.Key{Space: fsm.SpaceInternal, Resource: "signingkeys", Name: "k"}, 0); kv != nil {
			t.Fatal("an internal record was written")
		}
		if _, err := f.node.call(ctx, l.addr, rpcRequest{Op: opPropose}); !errors.Is(err, errBadRequest) {
			t.Fatalf("an empty frame: %v, want a bad request", err)
		}
	})

	t.Run("concurrent proposals share frames", func(t *testing.T) {
		const writers = 40
		// The leader holds the first frames until every writer has
		// queued its command behind them.
		release := make(chan struct{})
		hook := func() { <-release }
		l.node.proposeHook.Store(&hook)
		defer func() {
			l.node.proposeHook.Store(nil)
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		framesBefore, queuedBefore := f.node.proposals.frames.Load(), f.node.proposals.queued.Load()
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := f.node.Submit(ctx, putCmd(fmt.Sprintf("shared-%d", i), "v"))
				if err == nil && res.Err != nil {
					err = res.Err
				}
				errs <- err
			}()
		}
		waitFor(t, "the writers to queue", func() bool { return f.node.proposals.queued.Load()-queuedBefore == writers })
		l.node.proposeHook.Store(nil)
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if frames := f.node.proposals.frames.Load() - framesBefore; frames > 2*maxBatchSenders {
			t.Fatalf("%d writers took %d frames, want at most %d", writers, frames, 2*maxBatchSenders)
		}
		for i := range writers {
			if kv, _, _ := l.fsm.Get(testKey(fmt.Sprintf("shared-%d", i)), 0); kv == nil {
				t.Fatalf("shared-%d was not written", i)
			}
		}
	})

	t.Run("a stale follower gets the conflict", func(t *testing.T) {
		before, _, _ := f.fsm.Get(testKey("a"), 0)
		c.disconnectRaft(f) // the log stops reaching f; the RPC still works
		defer func() {
			// The next subtests want a settled cluster: f following
			// again, its election attempts (if any) over.
			c.reconnectRaft(f)
			c.leader()
		}()
		newer := l.propose(t, ctx, "a")
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		res, err := f.node.Submit(sctx, &fsm.Command{Op: fsm.OpPut, Key: testKey("a"), Value: []byte("y"), ModRevision: before.ModRevision})
		if err != nil || !errors.Is(res.Err, fsm.ErrModRevisionMismatch) || res.Revision <= newer {
			t.Fatalf("stale update: %v %+v, want a mismatch after %d", err, res, newer)
		}
	})

	t.Run("a leader out of reach is a definite failure", func(t *testing.T) {
		l, f := c.leaderAndFollower()
		// The RPC only: raft still flows. The cut resets the connections
		// made before it, pooled ones included.
		c.router.partition(f.addr, l.addr, true)
		defer c.router.partition(f.addr, l.addr, false)
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := f.node.Submit(sctx, putCmd("unreachable", "v"))
		if !errors.Is(err, ErrNoLeader) || errors.Is(err, ErrTimeout) {
			t.Fatalf("Submit to a leader it cannot reach: %v, want ErrNoLeader (nothing written), not an unknown outcome", err)
		}
		if kv, _, _ := l.fsm.Get(testKey("unreachable"), 0); kv != nil {
			t.Fatal("the write was applied")
		}
	})

	t.Run("the leader lost mid-call is an unknown outcome", func(t *testing.T) {
		l, f := c.leaderAndFollower()
		taken := make(chan struct{})
		release := make(chan struct{})
		hook := func() { close(taken); <-release }
		l.node.proposeHook.Store(&hook)
		defer close(release)
		errc := make(chan error, 1)
		go func() {
			_, err := f.node.Submit(ctx, putCmd("mid-call", "v"))
			errc <- err
		}()
		<-taken
		_ = l.node.Shutdown() // closes the call's connection
		if err := <-errc; !errors.Is(err, ErrTimeout) {
			t.Fatalf("Submit through a leader that died mid-call: %v, want ErrTimeout (outcome unknown)", err)
		}
		// Once the survivors know a new leader, it takes the next write.
		c.leader()
		res, err := f.node.Submit(ctx, putCmd("after", "v"))
		if err != nil || res.Err != nil {
			t.Fatalf("Submit after the leader died: %v %+v", err, res)
		}
	})
}
