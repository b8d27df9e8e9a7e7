package watchcache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/trustplane/trustplane/fsm"
	testingclock "k8s.io/utils/clock/testing"
)

// safety bounds waits that should end at once; it is a hang detector, not a
// timing assertion.
const safety = 10 * time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness drives a real FSM with consecutive log indexes.
type harness struct {
	t    testing.TB
	mu   sync.Mutex
	f    *fsm.FSM
	next uint64
	clk  *testingclock.FakeClock
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, f: fsm.New(), next: 1, clk: testingclock.NewFakeClock(t0)}
}

func (h *harness) apply(c *fsm.Command) uint64 {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.next
	h.next++
	r := h.f.ApplyBatch([]*raft.Log{{Index: i, Type: raft.LogCommand, Data: c.Encode()}})[0].(*fsm.Result)
	if r.Err != nil {
		h.t.Errorf("apply %v %v at %d: %v", c.Op, c.Key, i, r.Err)
	}
	return i
}

func (h *harness) put(k fsm.Key, v string) uint64 {
	h.t.Helper()
	return h.apply(&fsm.Command{Op: fsm.OpPut, Key: k, Value: []byte(v), UID: "uid-" + k.Name})
}

func (h *harness) del(k fsm.Key) uint64 {
	h.t.Helper()
	return h.apply(&fsm.Command{Op: fsm.OpDelete, Key: k})
}

func (h *harness) compact(rev uint64) uint64 {
	h.t.Helper()
	return h.apply(&fsm.Command{Op: fsm.OpCompact, CompactRevision: rev})
}

// gap applies a non-command entry: the index advances with no event.
func (h *harness) gap() uint64 {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.next
	h.next++
	h.f.ApplyBatch([]*raft.Log{{Index: i, Type: raft.LogConfiguration}})
	return i
}

func testConfig(clk *testingclock.FakeClock) *Config {
	cfg := DefaultConfig()
	cfg.Clock = clk
	cfg.Decode = func(kv *fsm.KV) (any, error) { return string(kv.Value), nil }
	return cfg
}

// cache builds a Cache over h.f with the test config changed by mod.
func (h *harness) cache(mod func(*Config)) *Cache {
	h.t.Helper()
	cfg := testConfig(h.clk)
	if mod != nil {
		mod(cfg)
	}
	c, err := New(cfg, h.f)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(c.Close)
	return c
}

func watch(t testing.TB, c *Cache, opts WatchOptions) *Watcher {
	t.Helper()
	w, err := c.Watch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", opts, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func pod(ns, name string) fsm.Key { return fsm.Key{Resource: "pods", Namespace: ns, Name: name} }
func cm(ns, name string) fsm.Key  { return fsm.Key{Resource: "configmaps", Namespace: ns, Name: name} }

var (
	pods       = fsm.Prefix{Resource: "pods"}
	configmaps = fsm.Prefix{Resource: "configmaps"}
)

// format renders an event as "TYPE rev ns/name=object", "BOOKMARK rev"
// or "BOOKMARK rev end".
func format(t testing.TB, ev Event) string {
	t.Helper()
	if ev.Type == Bookmark {
		if ev.InitialEventsEnd {
			return fmt.Sprintf("BOOKMARK %d end", ev.Revision)
		}
		return fmt.Sprintf("BOOKMARK %d", ev.Revision)
	}
	obj, err := ev.Object()
	if err != nil {
		t.Fatalf("Object: %v", err)
	}
	return fmt.Sprintf("%s %d %s/%s=%v", ev.Type, ev.Revision, ev.KV.Key.Namespace, ev.KV.Key.Name, obj)
}

func recv(t testing.TB, w *Watcher) Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watcher ended early: %v", w.Err())
		}
		return ev
	case <-time.After(safety):
		t.Fatal("no event")
	}
	return Event{}
}

func recvN(t testing.TB, w *Watcher, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	for range n {
		out = append(out, format(t, recv(t, w)))
	}
	return out
}

// ended waits for the watcher to end and returns every event still in its
// channel, formatted.
func ended(t testing.TB, w *Watcher) []string {
	t.Helper()
	select {
	case <-w.exited:
	case <-time.After(safety):
		t.Fatal("watcher did not end")
	}
	var out []string
	for ev := range w.Events() {
		out = append(out, format(t, ev))
	}
	return out
}

// waitTimer waits until a bookmark timer is armed on the fake clock, so a
// Step after it fires the timer. It polls a condition; it asserts nothing
// about time.
func waitTimer(t testing.TB, clk *testingclock.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("no timer armed")
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func persist(t testing.TB, f *fsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

func restoreInto(t testing.TB, f *fsm.FSM, b []byte) {
	t.Helper()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { return nil }
func (s *memSink) Cancel() error { return nil }

func lines(s ...string) string { return strings.Join(s, "\n") }
