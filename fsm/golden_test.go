package fsm

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/internal/golden"
)

// goldenCommands are commands of every op, flag and key space, as version 1
// encodes them.
var goldenCommands = map[string]*Command{
	"put-create": {Op: OpPut, Key: Key{Resource: "configmaps", Namespace: "default", Name: "cm"},
		Value: []byte(`{"kind":"ConfigMap"}`), UID: "3f0c7a4e-uid", MustNotExist: true},
	"put-update": {Op: OpPut, Key: Key{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Name: "csr-1"},
		Value: []byte{0x6b, 0x38, 0x73, 0x00, 0xff}, UID: "u-2", ModRevision: 1234567, MatchUID: "u-2"},
	"put-custom":   {Op: OpPut, Key: Key{Space: SpaceCustom, Group: "example.com", Resource: "gizmos", Namespace: "ns", Name: "g"}, Value: []byte("{}"), UID: "u-3"},
	"put-internal": {Op: OpPut, Key: Key{Space: SpaceInternal, Resource: "signingkeys", Name: "current"}, Value: []byte("sealed"), ModRevision: 9},
	"delete":       {Op: OpDelete, Key: Key{Resource: "secrets", Namespace: "kube-system", Name: "s"}, ModRevision: 77, MatchUID: "u-4"},
	"compact":      {Op: OpCompact, CompactRevision: 1 << 40},
	"noop":         {Op: OpNoop},
}

// TestGoldenCommandsV1: the Raft entries version 1 wrote (testdata/
// command-v1, committed once: internal/golden) decode to the same commands, and this build
// still writes those very bytes for them. An entry of another version is
// refused with a message naming the versions, so that a node never applies
// an entry a newer build wrote.
func TestGoldenCommandsV1(t *testing.T) {
	for name, want := range goldenCommands {
		t.Run(name, func(t *testing.T) {
			b := golden.File(t, filepath.Join("testdata", "command-v1", name+".bin"), want.Encode())
			got, err := DecodeCommand(b)
			if err != nil {
				t.Fatalf("decoding the version 1 entry: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the version 1 entry decodes to %+v, want %+v", got, want)
			}
			if enc := want.Encode(); !bytes.Equal(enc, b) {
				t.Fatalf("this build encodes %x, version 1 wrote %x: a format change needs CommandVersion %d", enc, b, CommandVersion+1)
			}
			newer := append([]byte{CommandVersion + 1}, b[1:]...)
			_, err = DecodeCommand(newer)
			if !errors.Is(err, ErrUnknownCommand) || !strings.Contains(err.Error(), "version 2, and this build reads version 1 only") {
				t.Fatalf("an entry of version 2: %v, want ErrUnknownCommand naming both versions", err)
			}
		})
	}
}

// goldenState is the fsm state of the golden snapshot: the script log of
// every kind of entry, then an object in each key space.
func goldenState(t *testing.T) *FSM {
	f := New()
	logs := scriptLog()
	idx := logs[len(logs)-1].Index
	for _, c := range []*Command{goldenCommands["put-custom"], goldenCommands["put-internal"]} {
		c := *c
		c.ModRevision = 0
		idx++
		logs = append(logs, cmdLog(idx, &c))
	}
	applyAll(t, f, logs, 7)
	return f
}

// TestGoldenSnapshotV1: a snapshot version 1 wrote (testdata/
// snapshot-v1.bin) restores to the state it was taken of, and this build
// writes the same bytes for that state; a snapshot of another version is
// refused, naming the versions, and changes nothing.
func TestGoldenSnapshotV1(t *testing.T) {
	want := goldenState(t)
	b := golden.File(t, filepath.Join("testdata", "snapshot-v1.bin"), persist(t, want))
	got := restore(t, b)
	if got.AppliedIndex() != want.AppliedIndex() {
		t.Fatalf("the version 1 snapshot restores applied index %d, want %d", got.AppliedIndex(), want.AppliedIndex())
	}
	if again := persist(t, got); !bytes.Equal(again, b) {
		t.Fatalf("this build writes another snapshot of the state version 1 wrote: a format change needs SnapshotVersion %d", SnapshotVersion+1)
	}
	if enc := persist(t, want); !bytes.Equal(enc, b) {
		t.Fatal("this build's snapshot of the golden state differs from version 1's bytes")
	}
	for _, k := range []Key{goldenCommands["put-custom"].Key, goldenCommands["put-internal"].Key,
		{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Name: "csr"}} {
		kv, _, err := got.Get(k, 0)
		if err != nil || kv == nil {
			t.Fatalf("%s after restoring the version 1 snapshot: %v %v", k, kv, err)
		}
	}

	newer := append([]byte(nil), b...)
	newer[len(snapshotMagic)] = SnapshotVersion + 1
	f := restore(t, b)
	before := persist(t, f)
	err := f.Restore(nopCloser{bytes.NewReader(newer)})
	if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "unknown version 2, and this build reads version 1 only") {
		t.Fatalf("a snapshot of version 2: %v, want ErrBadSnapshot naming both versions", err)
	}
	if after := persist(t, f); !bytes.Equal(after, before) {
		t.Fatal("a refused snapshot changed the state")
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
