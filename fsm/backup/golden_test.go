package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/internal/golden"
)

// TestGoldenBackupV1: a backup file format version 1 wrote
// (testdata/backup-v1.snap, committed once: internal/golden) opens with
// its header and state, and this build writes the same bytes for them; a
// file of another version is refused as unsupported, naming both versions.
func TestGoldenBackupV1(t *testing.T) {
	exp := testState(t).Export()
	want := writeFile(t, exp)
	b := golden.File(t, filepath.Join("testdata", "backup-v1.snap"), want)
	file, err := read(b)
	if err != nil {
		t.Fatalf("reading the version 1 backup: %v", err)
	}
	if !reflect.DeepEqual(file.Header, testHeader(exp)) {
		t.Fatalf("the version 1 backup's header is %+v, want %+v", file.Header, testHeader(exp))
	}
	got, err := file.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBytes(t, exp), stateBytes(t, got)) {
		t.Fatal("the version 1 backup's state differs from the state it was taken of")
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
