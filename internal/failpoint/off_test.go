//go:build !failpoints

package failpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// TestOffIsIdentity: without the tag nothing is wrapped and the control
// file is ignored.
func TestOffIsIdentity(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("disk-full=true"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Open(dir, nil)
	inner := raft.NewInmemStore()
	if p.LogStore(inner) != raft.LogStore(inner) || p.StableStore(inner) != raft.StableStore(inner) {
		t.Fatal("a store was wrapped without the failpoints tag")
	}
	if err := p.CheckStorage(); err != nil {
		t.Fatalf("CheckStorage without the tag: %v", err)
	}
	if Enabled {
		t.Fatal("Enabled without the tag")
	}
}
