package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

// scriptLog is a log with every kind of entry: creates, updates, deletes,
// re-creates, failed preconditions, config entries, no-ops, compaction.
func scriptLog() []*raft.Log {
	var logs []*raft.Log
	idx := uint64(0)
	add := func(c *Command) {
		idx++
		logs = append(logs, cmdLog(idx, c))
	}
	cfg := func() {
		idx++
		logs = append(logs, &raft.Log{Index: idx, Type: raft.LogConfiguration, Data: []byte{1, 2, 3}})
	}
	cfg()
	for i := 0; i < 40; i++ {
		k := Key{Resource: "configmaps", Namespace: fmt.Sprintf("ns-%d", i%3), Name: fmt.Sprintf("cm-%02d", i%11)}
		add(&Command{Op: OpPut, Key: k, Value: []byte(fmt.Sprintf("value %d", i)), UID: fmt.Sprintf("uid-%d", i%11)})
		switch i % 7 {
		case 1:
			add(&Command{Op: OpDelete, Key: k})
		case 2:
			add(&Command{Op: OpPut, Key: k, MustNotExist: true}) // fails
		case 3:
			add(&Command{Op: OpPut, Key: k, Value: []byte("cas"), ModRevision: 1}) // fails
		case 4:
			cfg()
		case 5:
			add(&Command{Op: OpNoop})
		}
		if i == 25 {
			add(&Command{Op: OpCompact, CompactRevision: idx - 10})
		}
	}
	add(&Command{Op: OpPut, Key: Key{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Name: "csr"}, Value: []byte{}, UID: "u"})
	add(&Command{Op: OpDelete, Key: Key{Resource: "configmaps", Namespace: "ns-0", Name: "cm-00"}, MatchUID: "wrong"}) // fails
	return logs
}

func applyAll(t testing.TB, f *FSM, logs []*raft.Log, batch int) {
	t.Helper()
	for len(logs) > 0 {
		n := min(batch, len(logs))
		if out := f.ApplyBatch(logs[:n]); len(out) != n {
			t.Fatalf("ApplyBatch returned %d results for %d logs", len(out), n)
		}
		logs = logs[n:]
	}
}

func TestDeterminism(t *testing.T) {
	logs := scriptLog()
	a, b := New(), New()
	// One applies entry by entry, the other in batches: same bytes.
	for _, l := range logs {
		a.Apply(l)
	}
	applyAll(t, b, logs, 7)
	sa, sb := persist(t, a), persist(t, b)
	if !bytes.Equal(sa, sb) {
		t.Fatal("snapshots of the same log differ")
	}
	if a.CompactedRevision() == 0 {
		t.Fatal("script did not compact")
	}
	// And again, from scratch: no hidden state (maps, clocks) leaks in.
	c := New()
	applyAll(t, c, logs, 64)
	if !bytes.Equal(persist(t, c), sa) {
		t.Fatal("third FSM differs")
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	logs := scriptLog()
	split := len(logs) - 6
	orig := New()
	applyAll(t, orig, logs[:split], 5)
	snap := persist(t, orig)

	rec := &recorder{}
	restored := New()
	restored.Subscribe(rec)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.indexes, []uint64{orig.AppliedIndex()}) {
		t.Fatalf("OnIndex after restore: %v, want [%d]", rec.indexes, orig.AppliedIndex())
	}
	if err := restored.WaitApplied(t.Context(), orig.AppliedIndex()); err != nil {
		t.Fatal(err)
	}
	if restored.AppliedIndex() != orig.AppliedIndex() || restored.CompactedRevision() != orig.CompactedRevision() {
		t.Fatalf("indexes: restored %d/%d, original %d/%d", restored.AppliedIndex(), restored.CompactedRevision(),
			orig.AppliedIndex(), orig.CompactedRevision())
	}
	for _, p := range []Prefix{{Resource: "configmaps"}, {Resource: "configmaps", Namespace: "ns-1"}, {Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}} {
		for rev := orig.CompactedRevision(); rev <= orig.AppliedIndex(); rev++ {
			lo, err1 := orig.List(p, ListOptions{Revision: rev})
			lr, err2 := restored.List(p, ListOptions{Revision: rev})
			if err1 != nil || err2 != nil || !reflect.DeepEqual(lo, lr) {
				t.Fatalf("List(%v) at %d differs: %v %v\n%+v\n%+v", p, rev, err1, err2, lo, lr)
			}
			for _, kv := range lo.KVs {
				g, _, err := restored.Get(kv.Key, rev)
				if err != nil || !reflect.DeepEqual(g, kv) {
					t.Fatalf("Get(%v) at %d = %+v, %v; want %+v", kv.Key, rev, g, err, kv)
				}
			}
		}
		if orig.Count(p) != restored.Count(p) {
			t.Fatalf("Count(%v) differs", p)
		}
	}
	if !bytes.Equal(persist(t, restored), snap) {
		t.Fatal("snapshot of restored FSM differs")
	}
	// The rest of the log keeps them identical.
	applyAll(t, orig, logs[split:], 2)
	applyAll(t, restored, logs[split:], 3)
	if !bytes.Equal(persist(t, orig), persist(t, restored)) {
		t.Fatal("snapshots differ after applying the same tail")
	}
}

func TestRestoreReplacesState(t *testing.T) {
	h := newHarness(t)
	h.mustPut(pod("ns", "old"), "x")
	empty := persist(t, New())
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(empty))); err != nil {
		t.Fatal(err)
	}
	if kv, _, _ := h.f.Get(pod("ns", "old"), 0); kv != nil || h.f.AppliedIndex() != 0 || h.f.Count(pods) != 0 {
		t.Fatal("Restore kept old state")
	}
}

func TestSnapshotIsolation(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 200; i++ {
		h.mustPut(pod("ns", fmt.Sprintf("p%03d", i)), "v1")
	}
	want := persist(t, h.f)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Writes after Snapshot, before Persist: updates, deletes, creates,
	// compaction.
	for i := 0; i < 200; i += 3 {
		h.mustPut(pod("ns", fmt.Sprintf("p%03d", i)), "v2")
		h.mustDelete(pod("ns", fmt.Sprintf("p%03d", i+1)))
		h.mustPut(pod("ns2", fmt.Sprintf("new%03d", i)), "v1")
	}
	h.apply(&Command{Op: OpCompact, CompactRevision: h.next - 1})
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("later writes leaked into the snapshot")
	}
	if !bytes.Equal(persist(t, restore(t, sink.Bytes())), want) {
		t.Fatal("restored isolated snapshot differs")
	}
}

type failingSink struct {
	memSink
	after int
}

func (s *failingSink) Write(p []byte) (int, error) {
	if s.Len()+len(p) > s.after {
		return 0, errors.New("disk full")
	}
	return s.memSink.Write(p)
}

func TestPersistCancelsSinkOnError(t *testing.T) {
	h := newHarness(t)
	h.mustPut(pod("ns", "a"), string(bytes.Repeat([]byte("x"), 100<<10)))
	snap, _ := h.f.Snapshot()
	sink := &failingSink{after: 10}
	if err := snap.Persist(sink); err == nil {
		t.Fatal("Persist succeeded on a failing sink")
	}
	if !sink.cancelled || sink.closed {
		t.Fatalf("cancelled=%v closed=%v, want cancelled only", sink.cancelled, sink.closed)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	logs := scriptLog()
	f := New()
	applyAll(t, f, logs, 16)
	good := persist(t, f)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"wrong magic", append([]byte("NOTSNAP\x01"), good[8:]...)},
		{"unknown version", append([]byte(snapshotMagic+"\x02"), good[8:]...)},
		{"truncated header", good[:10]},
		{"truncated body", good[:len(good)/2]},
		{"missing checksum", good[:len(good)-4]},
		{"bad checksum", flip(len(good) - 1)},
		{"flipped value byte", flip(len(good) - 10)},
		{"trailing data", append(bytes.Clone(good), 0)},
		{"huge length", append([]byte(snapshotMagic+"\x01\x05\x00\x01"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)},
		{"compacted beyond applied", []byte(snapshotMagic + "\x01\x01\x02\x00\x00\x00\x00\x00")},
	}
	for i := 8; i < len(good); i += 37 {
		cases = append(cases, struct {
			name string
			in   []byte
		}{fmt.Sprintf("flip byte %d", i), flip(i)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustPut(pod("ns", "keep"), "x")
			err := h.f.Restore(io.NopCloser(bytes.NewReader(tc.in)))
			if err == nil {
				t.Fatal("Restore accepted garbage")
			}
			if kv, _, _ := h.f.Get(pod("ns", "keep"), 0); kv == nil || h.f.AppliedIndex() != 1 {
				t.Fatal("failed Restore changed state")
			}
		})
	}
}
