package fsm

import (
	"fmt"
	"io"
)

// Export is a point-in-time copy of the whole state, for backups (trustplane
// snapshot save) and for seeding a new cluster from one (trustplane
// snapshot restore). It is the same copy-on-write clone a raft snapshot
// takes, so making one costs O(1) and never stalls Apply; it is immutable
// and safe for concurrent use.
type Export struct {
	snap fsmSnapshot
}

// Export clones the state as it is now. Its Index is the applied index, so
// it holds every write applied up to it and none after; callers that need
// every acknowledged write first wait for a read index (cluster does).
func (f *FSM) Export() *Export {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Export{snap: fsmSnapshot{tree: f.st.tree.Clone(), applied: f.st.applied, compacted: f.st.compacted}}
}

// ReadExport parses and verifies snapshot bytes in the format raft
// snapshots use (Persist writes it, WriteTo too). A parse or checksum
// failure wraps ErrBadSnapshot.
func ReadExport(r io.Reader) (*Export, error) {
	st, err := readSnapshot(r, nil)
	if err != nil {
		return nil, err
	}
	return &Export{snap: fsmSnapshot{tree: st.tree, applied: st.applied, compacted: st.compacted}}, nil
}

// Index is the applied index the state was taken at: the log index of the
// last entry it contains, so at least every object's ModRevision.
func (e *Export) Index() uint64 { return e.snap.applied }

// CompactedRevision is the oldest revision whose reads the state can still
// answer (older history was compacted away before the export).
func (e *Export) CompactedRevision() uint64 { return e.snap.compacted }

// WriteTo writes the state in the raft snapshot format, so that a node's
// Restore (raft's InstallSnapshot, or a start from a seeded snapshot store)
// reads it back. Keys for which drop returns true are left out with their
// whole history; drop nil keeps every key. The output of two Exports of
// the same state with the same drop is byte-identical.
func (e *Export) WriteTo(w io.Writer, drop func(Key) bool) error {
	if err := e.snap.writeTo(w, drop); err != nil {
		return fmt.Errorf("fsm: write snapshot at %d: %w", e.snap.applied, err)
	}
	return nil
}

// Live calls fn for every live object at Index, in key order, until fn
// returns false. The KVs are shared and immutable.
func (e *Export) Live(fn func(*KV) bool) {
	e.snap.tree.Ascend(func(en entry) bool {
		if kv := en.latest(); kv != nil {
			return fn(kv)
		}
		return true
	})
}

// Versions is the number of retained versions (live, superseded and
// tombstones) over every key: the size of the MVCC history carried.
func (e *Export) Versions() int {
	n := 0
	e.snap.tree.Ascend(func(en entry) bool {
		n += len(en.versions)
		return true
	})
	return n
}
