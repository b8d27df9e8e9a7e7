package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeGolden creates a missing golden file, never rewrites one: a format
// version's bytes are its contract with every backup already taken.
var writeGolden = flag.Bool("write-golden", false, "create missing golden files under testdata/")

// TestGoldenBackupV1: a backup file format version 1 wrote
// (testdata/backup-v1.snap, committed once) opens with its header and
// state, and this build writes the same bytes for them; a file of another
// version is refused as unsupported, naming both versions.
func TestGoldenBackupV1(t *testing.T) {
	exp := testState(t).Export()
	path := filepath.Join("testdata", "backup-v1.snap")
	want := writeFile(t, exp)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && *writeGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := Open(path)
	if err != nil {
		t.Fatalf("opening the version 1 backup: %v (go test ./fsm/backup -run Golden -write-golden creates a missing file)", err)
	}
	if !reflect.DeepEqual(file.Header, testHeader(exp)) {
		t.Fatalf("the version 1 backup's header is %+v, want %+v", file.Header, testHeader(exp))
	}
	got, err := file.Load()
	if err != nil {
		t.Fatal(err)
	}
	var state, again bytes.Buffer
	if err := exp.WriteTo(&state, nil); err != nil {
		t.Fatal(err)
	}
	if err := got.WriteTo(&again, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(state.Bytes(), again.Bytes()) {
		t.Fatal("the version 1 backup's state differs from the state it was taken of")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, b) {
		t.Fatalf("this build writes another backup of the same state and header: a format change needs FormatVersion %d", FormatVersion+1)
	}

	newer := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(newer[len(magic):], FormatVersion+1)
	_, err = read(newer)
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "2 (this binary reads 1)") {
		t.Fatalf("a backup of version 2: %v, want ErrUnsupportedVersion naming both versions", err)
	}
}
