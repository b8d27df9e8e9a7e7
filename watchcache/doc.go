// Package watchcache owns each node's window of applied events and the
// watches served from it: per-watcher namespace, label and field filtering
// (a predicate on decoded objects, with kube's ADDED/DELETED transitions
// when an object enters or leaves a selector), initial events, bookmarks at
// the node's applied index, and the resourceVersion rules of a watch
// (exactly the changes after N; 410 Gone, "too old resource version", when
// N is older than the window; wait when N is in the future).
//
// It imports only fsm (and k8s.io/utils/clock), and it keeps these rules:
//
//   - Fed only from the applied stream. The Cache is an fsm.Listener; the
//     api never writes into it. Revisions are Raft log indexes, so they have
//     gaps: the window is "every change in (oldest, applied]", never a count.
//
//   - Bounded by age, count and bytes (Window, MaxEvents, MaxBytes), per
//     node; the oldest events go first, and a watch from before the window
//     gets 410. The bound is local: it never changes the fsm.
//
//   - History survives restarts. On start and on every fsm Restore the
//     window is rebuilt from the fsm's retained MVCC history (which
//     snapshots carry), then the replayed log appends to it, so a client can
//     resume from a resourceVersion taken before the restart as long as it
//     is after the compacted revision and inside the window.
//
//   - Never block apply. OnApply only appends; OnIndex wakes watchers with a
//     non-blocking signal and moves idle ones forward in place. Each watcher
//     reads the window from its own position in its own goroutine, so the
//     window is the buffer and a slow client costs no memory of its own.
//
//   - Slow watchers are cut off. A watcher whose client has not read while
//     more than Config.WatcherBuffer events were applied, or that the
//     window has moved past, ends with ErrSlowWatcher; the client resumes
//     from the last resourceVersion it received (and relists on 410).
//
//   - Subscribe, then replay. A watcher is registered at its start position
//     before any history is read; the replay and the live stream are the
//     same window read from that position, without a lock held across the
//     replay, so there is no gap and no duplicate between them (kine's
//     approach; the cache itself does the same against the fsm on start).
//
//   - Idle progress. Bookmarks carry the node's applied index even when
//     nothing a watcher selects has changed, so an idle watcher's
//     resourceVersion never falls behind the node (kubernetes#91073).
//
//   - Decoded objects are not held here. The window holds stored versions
//     (and counts their bytes); a decoded object is asked of Config.Decode
//     whenever a watcher needs it, which in production is the storage
//     layer's bounded cache of one shared, immutable object per stored
//     version. So each version is decoded once per node and held once
//     while that cache holds it (an evicted version is decoded again when
//     asked), and events that nobody watches are never decoded. Objects handed out are shared and
//     must be copied before they are changed.
package watchcache
