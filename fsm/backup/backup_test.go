package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// testState is an fsm with objects in two resources, history, a deletion
// and an encrypted value.
func testState(t testing.TB) *fsm.FSM {
	t.Helper()
	f := fsm.New()
	var logs []*raft.Log
	add := func(c *fsm.Command) {
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: c.Encode()})
	}
	for i := range 5 {
		add(&fsm.Command{Op: fsm.OpPut, Key: fsm.Key{Resource: "configmaps", Namespace: "ns", Name: fmt.Sprintf("cm-%d", i)}, Value: []byte("v"), UID: fmt.Sprint("u", i)})
	}
	add(&fsm.Command{Op: fsm.OpPut, Key: fsm.Key{Resource: "configmaps", Namespace: "ns", Name: "cm-0"}, Value: []byte("v2"), UID: "u0"})
	add(&fsm.Command{Op: fsm.OpDelete, Key: fsm.Key{Resource: "configmaps", Namespace: "ns", Name: "cm-4"}})
	add(&fsm.Command{Op: fsm.OpPut, Key: fsm.Key{Resource: "secrets", Namespace: "ns", Name: "s"}, Value: []byte("k8s:enc:aescbc:v1:key1:\x00\x01ciphertext"), UID: "us"})
	add(&fsm.Command{Op: fsm.OpPut, Key: fsm.Key{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Name: "csr"}, Value: []byte("c"), UID: "uc"})
	add(&fsm.Command{Op: fsm.OpNoop})
	f.ApplyBatch(logs)
	return f
}

func testHeader(exp *fsm.Export) Header {
	return Header{Index: exp.Index(), Term: 7, Node: "n2", ClusterID: "abc", ServerVersion: "v0.0.0-test", Created: time.Date(2026, 11, 24, 1, 2, 3, 0, time.UTC)}
}

func writeFile(t testing.TB, exp *fsm.Export) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, testHeader(exp), func(w io.Writer) error { return exp.WriteTo(w, nil) }); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func read(b []byte) (*File, error) { return Read(bytes.NewReader(b), int64(len(b))) }

// stateBytes is exp's state in the snapshot format, whole.
func stateBytes(t testing.TB, exp *fsm.Export) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := exp.WriteTo(&buf, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	f := testState(t)
	exp := f.Export()
	b := writeFile(t, exp)

	path := filepath.Join(t.TempDir(), "s.snap")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := testHeader(exp); !reflect.DeepEqual(file.Header, want) {
		t.Fatalf("header %+v, want %+v", file.Header, want)
	}
	if file.Size != int64(len(b)) {
		t.Fatalf("size %d, want %d", file.Size, len(b))
	}
	got, err := file.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := stateBytes(t, exp)
	if !bytes.Equal(want, stateBytes(t, got)) {
		t.Fatal("the state read back differs from the state written")
	}
	if file.StateSize != int64(len(want)) {
		t.Fatalf("state size %d, want %d", file.StateSize, len(want))
	}

	s := Summarize(got)
	if wantObjs := map[string]int{"configmaps": 4, "secrets": 1, "certificates.k8s.io/certificatesigningrequests": 1}; !reflect.DeepEqual(s.Objects, wantObjs) {
		t.Fatalf("objects %v, want %v", s.Objects, wantObjs)
	}
	if wantEnc := map[string]int{"k8s:enc:aescbc:v1:key1": 1}; !reflect.DeepEqual(s.Encrypted, wantEnc) {
		t.Fatalf("encrypted %v, want %v", s.Encrypted, wantEnc)
	}
	// The no-op at the end is index 10; the newest object is at 9.
	if s.MaxRevision != 9 || got.Index() != 10 {
		t.Fatalf("max revision %d, index %d; want 9, 10", s.MaxRevision, got.Index())
	}
	// cm-0 has two versions, cm-4 a version and a tombstone.
	if s.Versions != 9 {
		t.Fatalf("versions %d, want 9", s.Versions)
	}
}

// TestFlippedByteRefused: a flip anywhere is refused with a sentinel,
// and one in the header or the state is a checksum mismatch.
func TestFlippedByteRefused(t *testing.T) {
	b := writeFile(t, testState(t).Export())
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x01
		_, err := read(bad)
		if err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
		if !isRefusal(err) {
			t.Fatalf("byte %d flipped: %v is no sentinel", i, err)
		}
		if i >= prefixLen && i < len(b)-trailerLen && !errors.Is(err, ErrChecksum) {
			t.Fatalf("byte %d (header or state) flipped: %v, want ErrChecksum", i, err)
		}
	}
}

// TestTruncatedRefused: every proper prefix of a file is refused, as
// truncated once it is long enough to be recognised.
func TestTruncatedRefused(t *testing.T) {
	b := writeFile(t, testState(t).Export())
	for n := range len(b) {
		_, err := read(b[:n])
		switch {
		case n == 0 && !errors.Is(err, ErrNotBackup):
			t.Fatalf("empty file: %v, want ErrNotBackup", err)
		case n > 0 && !errors.Is(err, ErrTruncated):
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrTruncated", n, len(b), err)
		}
	}
}

func TestOtherFilesRefused(t *testing.T) {
	f := testState(t)
	var raw bytes.Buffer
	if err := f.Export().WriteTo(&raw, nil); err != nil {
		t.Fatal(err)
	}
	b := writeFile(t, f.Export())
	future := bytes.Clone(b)
	binary.BigEndian.PutUint32(future[len(magic):], FormatVersion+1)
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"a raft snapshot is not a backup": {raw.Bytes(), ErrNotBackup},
		"text is not a backup":            {[]byte("apiVersion: v1\nkind: Config\n"), ErrNotBackup},
		"a newer format is refused":       {future, ErrUnsupportedVersion},
		"bytes after the end marker":      {append(bytes.Clone(b), 'x'), ErrTruncated},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := read(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

// TestConsistentButWrongRefused: a file whose checksum matches but whose
// state disagrees with its header (written wrongly) is refused by Load.
func TestConsistentButWrongRefused(t *testing.T) {
	exp := testState(t).Export()
	h := testHeader(exp)
	h.Index++
	var buf bytes.Buffer
	if err := Write(&buf, h, func(w io.Writer) error { return exp.WriteTo(w, nil) }); err != nil {
		t.Fatal(err)
	}
	f, err := read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Load(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load: %v, want ErrCorrupt", err)
	}

	buf.Reset()
	if err := Write(&buf, testHeader(exp), func(w io.Writer) error { _, err := w.Write([]byte("not a state")); return err }); err != nil {
		t.Fatal(err)
	}
	if f, err = read(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Load(); !errors.Is(err, ErrCorrupt) || !errors.Is(err, fsm.ErrBadSnapshot) {
		t.Fatalf("Load of a garbage state: %v, want ErrCorrupt wrapping fsm.ErrBadSnapshot", err)
	}
}

// TestWriteFailureLeavesRefusedFile: a state writer that fails midway
// leaves a file Read refuses.
func TestWriteFailureLeavesRefusedFile(t *testing.T) {
	exp := testState(t).Export()
	var buf bytes.Buffer
	boom := errors.New("boom")
	err := Write(&buf, testHeader(exp), func(w io.Writer) error {
		if _, err := w.Write([]byte("TPFSNAP")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want boom", err)
	}
	if _, err := read(buf.Bytes()); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Read of a failed write: %v, want ErrTruncated", err)
	}
}

func TestEncryptionPrefixNeverShowsCiphertext(t *testing.T) {
	for in, want := range map[string]string{
		"k8s:enc:aesgcm:v1:k2:SECRET": "k8s:enc:aesgcm:v1:k2",
		"k8s:enc:secretbox:v1:x:":     "k8s:enc:secretbox:v1:x",
		"k8s:enc:broken":              "k8s:enc:?",
	} {
		if got, ok := encryptionPrefix([]byte(in)); !ok || got != want {
			t.Errorf("encryptionPrefix(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := encryptionPrefix([]byte("plain")); ok {
		t.Error("a plain value counted as encrypted")
	}
}

func isRefusal(err error) bool {
	for _, s := range []error{ErrNotBackup, ErrUnsupportedVersion, ErrTruncated, ErrChecksum, ErrCorrupt} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func TestMarkersFitTheirFields(t *testing.T) {
	if len(magic) != 8 || len(endMagic) != 8 || prefixLen != len(magic)+4+4 || trailerLen != 8+32+len(endMagic) {
		t.Fatal("the format's field sizes and the markers disagree")
	}
}
