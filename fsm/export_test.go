package fsm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// TestExportWritesRaftSnapshotBytes: an Export writes exactly what raft's
// Persist writes, and ReadExport reads it back to the same bytes, so a
// backup restores through raft's own path.
func TestExportWritesRaftSnapshotBytes(t *testing.T) {
	f := New()
	applyAll(t, f, scriptLog(), 5)
	want := persist(t, f)

	exp := f.Export()
	var got bytes.Buffer
	if err := exp.WriteTo(&got, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("Export.WriteTo differs from Persist")
	}
	if exp.Index() != f.AppliedIndex() || exp.CompactedRevision() != f.CompactedRevision() {
		t.Fatalf("export at %d/%d, fsm at %d/%d", exp.Index(), exp.CompactedRevision(), f.AppliedIndex(), f.CompactedRevision())
	}

	back, err := ReadExport(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := back.WriteTo(&again, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), want) {
		t.Fatal("ReadExport then WriteTo changed the bytes")
	}
}

// TestExportIsPointInTime: writes applied after Export are not in it.
func TestExportIsPointInTime(t *testing.T) {
	h := newHarness(t)
	h.mustPut(pod("a", "before"), "1")
	exp := h.f.Export()
	h.mustPut(pod("a", "after"), "2")
	h.mustPut(pod("a", "before"), "changed")

	var names []string
	exp.Live(func(kv *KV) bool {
		names = append(names, kv.Key.Name+"="+string(kv.Value))
		return true
	})
	if !reflect.DeepEqual(names, []string{"before=1"}) {
		t.Fatalf("export holds %v, want only before=1", names)
	}
}

// TestExportDropLeavesOutWholeKeys: dropped keys are gone with their whole
// history, everything else (every revision, the indexes) is as it was.
func TestExportDropLeavesOutWholeKeys(t *testing.T) {
	orig := New()
	applyAll(t, orig, scriptLog(), 3)
	dropNS := func(k Key) bool { return k.Namespace == "ns-1" }
	var buf bytes.Buffer
	if err := orig.Export().WriteTo(&buf, dropNS); err != nil {
		t.Fatal(err)
	}
	restored := New()
	if err := restored.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatalf("restore of a filtered export: %v", err)
	}
	if restored.AppliedIndex() != orig.AppliedIndex() || restored.CompactedRevision() != orig.CompactedRevision() {
		t.Fatal("indexes changed")
	}
	if n := restored.Count(Prefix{Resource: "configmaps", Namespace: "ns-1"}); n != 0 {
		t.Fatalf("%d dropped objects survived", n)
	}
	if orig.Count(Prefix{Resource: "configmaps", Namespace: "ns-1"}) == 0 {
		t.Fatal("the script has nothing in ns-1: the test checks nothing")
	}
	for _, p := range []Prefix{{Resource: "configmaps", Namespace: "ns-0"}, {Resource: "configmaps", Namespace: "ns-2"}, {Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}} {
		for rev := orig.CompactedRevision(); rev <= orig.AppliedIndex(); rev++ {
			lo, err1 := orig.List(p, ListOptions{Revision: rev})
			lr, err2 := restored.List(p, ListOptions{Revision: rev})
			if err1 != nil || err2 != nil || !reflect.DeepEqual(lo, lr) {
				t.Fatalf("List(%v) at %d differs: %v %v", p, rev, err1, err2)
			}
		}
	}
}

// TestReadExportRefusesDamage: truncation and flipped bytes are refused
// with ErrBadSnapshot (the fsm's own CRC), never returned as a state.
func TestReadExportRefusesDamage(t *testing.T) {
	f := New()
	applyAll(t, f, scriptLog(), 5)
	good := persist(t, f)
	for _, n := range []int{0, 1, 8, len(good) / 2, len(good) - 1} {
		if _, err := ReadExport(bytes.NewReader(good[:n])); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("truncated to %d bytes: %v, want ErrBadSnapshot", n, err)
		}
	}
	for _, i := range []int{0, 9, len(good) / 3, len(good) - 2} {
		bad := bytes.Clone(good)
		bad[i] ^= 0x40
		if _, err := ReadExport(bytes.NewReader(bad)); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("byte %d flipped: %v, want ErrBadSnapshot", i, err)
		}
	}
}
