package golden

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var write = flag.Bool("write-golden", false, "create missing golden files (an existing one is never rewritten)")

// File returns the golden file at path. With -write-golden a missing file
// is first created from want; without it, a missing file fails the test.
func File(t testing.TB, path string, want []byte) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && *write {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return want
	}
	if err != nil {
		t.Fatalf("%v (go test -run Golden -write-golden creates a missing golden file; none is ever rewritten)", err)
	}
	return b
}
