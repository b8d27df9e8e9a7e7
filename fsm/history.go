package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// History returns every retained change under p (the zero Prefix selects
// every key) with Revision > afterRev, in revision order, exactly as the
// applied stream delivered them: a put carries the version it wrote and the
// live version before it (nil for a create), a delete carries a copy of the
// deleted version with ModRevision set to the deleting revision and the
// version before it. It exists so that a listener that keeps its own window
// of events (the watch cache) can rebuild it after a restart or a Restore
// from the MVCC history that snapshots carry, instead of losing it.
//
// The second result is the applied index the answer is complete up to: a
// listener that subscribed before calling History gets every later change
// from OnApply, and drops the ones at or below it (subscribe, then replay).
//
// afterRev must not be older than the compacted revision, because below it
// the history is gone and the Prev of the first retained change can no
// longer be trusted; that is ErrCompacted (wrapped). An afterRev at or
// beyond the applied index is not an error: there is nothing after it yet.
// The read lock is held for a walk of the selected keys, so a large history
// delays the next apply by the walk's length; callers use it at start and
// on restore, not per request.
func (f *FSM) History(p Prefix, afterRev uint64) ([]Event, uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if afterRev < f.st.compacted {
		return nil, 0, fmt.Errorf("%w: history after revision %d is older than compacted revision %d",
			ErrCompacted, afterRev, f.st.compacted)
	}
	var evs []Event
	walk := func(e entry) bool {
		vs := e.versions
		// First version newer than afterRev; versions are strictly increasing.
		i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > afterRev })
		for ; i < len(vs); i++ {
			var prev *KV
			if i > 0 {
				prev = vs[i-1].kv
			}
			v := vs[i]
			if v.kv != nil {
				evs = append(evs, Event{Type: EventPut, Revision: v.rev, KV: v.kv, Prev: prev})
				continue
			}
			if prev == nil {
				// A tombstone always follows a live version (apply and
				// readSnapshot both guarantee it); skip rather than invent one.
				continue
			}
			gone := *prev
			gone.ModRevision = v.rev
			evs = append(evs, Event{Type: EventDelete, Revision: v.rev, KV: &gone, Prev: prev})
		}
		return true
	}
	if p == (Prefix{}) {
		f.st.tree.Ascend(walk)
	} else {
		f.st.ascendPrefix(p.String(), "", walk)
	}
	// Every event has its own log index, so revisions are unique.
	slices.SortFunc(evs, func(a, b Event) int { return cmp.Compare(a.Revision, b.Revision) })
	return evs, f.st.applied, nil
}
