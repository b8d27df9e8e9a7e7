package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// minFreeBytes is the free space below which the node reports itself not
// ready: bolt needs room to grow its file and raft to write snapshots, and
// a node that cannot persist must stop taking traffic before it fails.
const minFreeBytes = 64 << 20

// CheckStorage is the /readyz check that the data directory is writable and
// has room. A node failing it still answers reads it can, but load
// balancers stop sending it clients; raft itself never acknowledges a write
// it could not persist (a failed log write makes the leader step down).
func (n *Node) CheckStorage() error {
	if err := n.failpoints.CheckStorage(); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	dir := filepath.Join(n.cfg.DataDir, "raft")
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%w: data directory %s is not writable: %v", ErrStorage, dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%w: statfs %s: %v", ErrStorage, dir, err)
	}
	need := uint64(minFreeBytes)
	if n.minFreeBytes != 0 {
		need = n.minFreeBytes
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("%w: %d bytes free in %s, need %d", ErrStorage, free, dir, need)
	}
	if _, err := os.Stat(filepath.Join(dir, walDirName)); err != nil {
		return fmt.Errorf("%w: raft log: %v", ErrStorage, err)
	}
	return nil
}
