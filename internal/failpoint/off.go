//go:build !failpoints

package failpoint

import (
	"log/slog"

	"github.com/hashicorp/raft"
)

// Enabled reports whether failpoints are compiled in (build tag failpoints).
const Enabled = false

// Points is empty without the build tag.
type Points struct{}

// Open returns nil without the build tag: there is nothing to control.
func Open(string, *slog.Logger) *Points { return nil }

// LogStore returns s unchanged.
func (*Points) LogStore(s raft.LogStore) raft.LogStore { return s }

// StableStore returns s unchanged.
func (*Points) StableStore(s raft.StableStore) raft.StableStore { return s }

// SnapshotStore returns s unchanged.
func (*Points) SnapshotStore(s raft.SnapshotStore) raft.SnapshotStore { return s }

// State is all off.
func (*Points) State() State { return State{} }

// CheckStorage always passes.
func (*Points) CheckStorage() error { return nil }
