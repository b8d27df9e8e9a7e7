package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// harness drives an FSM with consecutive log indexes.
type harness struct {
	t    testing.TB
	f    *FSM
	next uint64
}

func newHarness(t testing.TB) *harness {
	return &harness{t: t, f: New(), next: 1}
}

func cmdLog(index uint64, c *Command) *raft.Log {
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: c.Encode()}
}

// apply applies c at the next index and returns its Result.
func (h *harness) apply(c *Command) *Result {
	h.t.Helper()
	i := h.next
	h.next++
	r, ok := h.f.Apply(cmdLog(i, c)).(*Result)
	if !ok {
		h.t.Fatalf("Apply at %d did not return *Result", i)
	}
	if r.Revision != i {
		h.t.Fatalf("Result.Revision = %d, want %d", r.Revision, i)
	}
	return r
}

// config applies a configuration entry at the next index.
func (h *harness) config() {
	h.t.Helper()
	i := h.next
	h.next++
	if r := h.f.Apply(&raft.Log{Index: i, Type: raft.LogConfiguration, Data: []byte("cfg")}); r != nil {
		h.t.Fatalf("config entry returned %v, want nil", r)
	}
}

func (h *harness) put(k Key, v string) *Result {
	h.t.Helper()
	return h.apply(&Command{Op: OpPut, Key: k, Value: []byte(v), UID: "uid-" + k.Name})
}

func (h *harness) mustPut(k Key, v string) *KV {
	h.t.Helper()
	r := h.put(k, v)
	if r.Err != nil {
		h.t.Fatalf("put %v: %v", k, r.Err)
	}
	return r.KV
}

func (h *harness) mustDelete(k Key) {
	h.t.Helper()
	if r := h.apply(&Command{Op: OpDelete, Key: k}); r.Err != nil {
		h.t.Fatalf("delete %v: %v", k, r.Err)
	}
}

func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

func restore(t testing.TB, b []byte) *FSM {
	t.Helper()
	f := New()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	return f
}

func pod(ns, name string) Key {
	return Key{Resource: "pods", Namespace: ns, Name: name}
}

var pods = Prefix{Resource: "pods"}

// recorder is a Listener that records what it is told.
type recorder struct {
	events  []Event
	batches int
	indexes []uint64
}

func (r *recorder) OnApply(evs []Event) { r.events = append(r.events, evs...); r.batches++ }
func (r *recorder) OnIndex(i uint64)    { r.indexes = append(r.indexes, i) }
