package fsm

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// FSM is the replicated state machine: raft feeds it committed log entries,
// and the rest of the node reads the MVCC store it keeps. See the package
// documentation for the rules it keeps.
type FSM struct {
	// applyMu serialises the apply path (ApplyBatch, Restore), including the
	// listener and waiter notifications, so listeners see batches in log
	// order even if a caller other than raft drives the FSM concurrently.
	applyMu sync.Mutex

	// mu guards st. Apply holds it for writing only while it mutates the
	// tree; readers hold it for reading only while they walk the tree. KVs
	// are immutable, so nothing is copied under the lock.
	mu sync.RWMutex
	st *store

	waiter    *indexWaiter
	listeners listenerSet
	// results remembers recent command results for ResultAt; mu guards it.
	results *resultRing
	// builtin classifies untagged keys read from the log and snapshots.
	builtin Builtin
}

// Config configures an FSM.
type Config struct {
	// Builtin reports whether a group and resource are a built-in
	// resource's keys. It settles the space of an untagged key read from
	// the log or a snapshot (keyspace.go): builds before key spaces wrote
	// custom objects untagged, under their definition's group and plural,
	// so an untagged key whose resource is not built in is one of those,
	// and lives in SpaceCustom from then on. It must be a pure function,
	// the same on every node of a cluster (the binary's list of built-in
	// resources, whatever --runtime-config enables), or nodes would
	// diverge. Nil keeps every untagged key built-in (tests).
	Builtin Builtin
}

var (
	_ raft.BatchingFSM = (*FSM)(nil)
	_ raft.FSMSnapshot = (*fsmSnapshot)(nil)
)

// New returns an empty FSM at applied index 0. Raft restores the latest
// snapshot (if any) and replays the log into it on start.
func New() *FSM { return NewWithConfig(Config{}) }

// NewWithConfig is New with a Config.
func NewWithConfig(cfg Config) *FSM {
	return &FSM{st: newStore(), waiter: newIndexWaiter(), results: new(resultRing), builtin: cfg.Builtin}
}

// Apply is raft's single-entry path; it has exactly the semantics of a
// one-entry ApplyBatch.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order. Every entry, whatever its
// type, advances the applied index to its Index, because the index is the
// resourceVersion clock and reads wait on it. For a LogCommand the response
// is a *Result (a failed precondition is a Result.Err, not a Go error: it
// changed nothing, but it still consumed its index); for any other entry it
// is nil.
//
// The batch is decoded before anything changes, and an entry that cannot be
// decoded, or whose index does not follow the applied index, panics: a node
// that cannot apply the log exactly as its peers do must stop rather than
// diverge. The whole batch becomes visible to readers at once; then
// listeners get one OnApply (if anything changed) and one OnIndex, and only
// after that are WaitApplied callers released, so a reader released by
// WaitApplied(n) knows every listener has seen index n.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	if len(logs) == 0 {
		return out
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()

	// Only appliers write st.applied, and applyMu excludes other appliers,
	// so it can be read here without mu.
	prev := f.st.applied
	cmds := make([]*Command, len(logs))
	for i, l := range logs {
		if l.Index <= prev {
			panic(fmt.Sprintf("fsm: log index %d does not follow applied index %d", l.Index, prev))
		}
		prev = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		c, err := DecodeCommand(l.Data)
		if err != nil {
			panic(fmt.Sprintf("fsm: cannot decode command at log index %d (term %d): %v", l.Index, l.Term, err))
		}
		if c.Op == OpPut || c.Op == OpDelete {
			f.builtin.classify(&c.Key)
		}
		cmds[i] = c
	}

	var evs []Event
	f.mu.Lock()
	for i, l := range logs {
		if c := cmds[i]; c != nil {
			var r *Result
			r, evs = f.st.apply(l.Index, c, evs)
			out[i] = r
			f.results.put(l.Index, r)
		}
		f.st.applied = l.Index
	}
	f.mu.Unlock()

	f.notify(evs, prev, false)
	return out
}

// notify runs the listeners, then releases waiters. Called with applyMu
// held and mu released, so listeners may read the FSM.
func (f *FSM) notify(evs []Event, index uint64, restored bool) {
	for _, s := range f.listeners.load() {
		if restored {
			if rl, ok := s.l.(RestoreListener); ok {
				rl.OnRestore(index)
			}
		}
		if len(evs) > 0 {
			s.l.OnApply(evs)
		}
		s.l.OnIndex(index)
	}
	f.waiter.trigger(index)
}

// Snapshot only clones the tree (O(1), copy-on-write) under the lock,
// because raft cannot apply while it runs; Persist does the serialising
// concurrently with later applies, which the clone never sees.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	// Clone writes to the source tree's copy-on-write context, so it needs
	// the write lock even though it changes nothing a reader sees.
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{tree: f.st.tree.Clone(), applied: f.st.applied, compacted: f.st.compacted}, nil
}

// Restore discards all state and replaces it with the snapshot's: applied
// index, compacted revision and every key's retained history. The snapshot
// is parsed and checked in full before anything is replaced, so a bad
// snapshot returns an error and leaves the FSM as it was. Afterwards
// listeners get OnRestore (if they implement RestoreListener) and OnIndex
// with the new applied index, and waiters up to it are released.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	st, err := readSnapshot(rc, f.builtin)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	f.notify(nil, st.applied, true)
	return nil
}

// ListOptions selects part of a List. Together with ListResult it carries
// what a Kubernetes list with limit/continue needs: a continue token is
// (Revision, StartAfter of the last returned key).
type ListOptions struct {
	Revision   uint64 // 0 = latest
	StartAfter string // a Key.String(); only keys strictly greater are returned ("" = from the start)
	Limit      int    // 0 = no limit
}

// ListResult is one page of a List.
type ListResult struct {
	KVs       []*KV  // ordered by Key.String() (namespace, then name); may be nil
	Revision  uint64 // revision the list was served at (applied index when Revision==0)
	More      bool   // true if Limit cut the list short
	Remaining int64  // number of live keys after the last returned one (only meaningful when More)
}

// Get serves a read from local state without waiting: consistency (read
// index, RV waits) is the caller's job, done before calling Get. rev==0
// reads the latest applied state; otherwise the version live at rev. A
// missing key is not an error (nil KV), because at the store level absence
// is a normal answer; the api decides whether it is a 404. The returned KV
// is shared and immutable. The second result is the revision the read was
// served at; it is 0 when err is ErrCompacted or ErrFutureRevision.
func (f *FSM) Get(key Key, rev uint64) (*KV, uint64, error) {
	k := key.String()
	f.mu.RLock()
	at, err := f.checkRevLocked(rev)
	if err != nil {
		f.mu.RUnlock()
		return nil, 0, err
	}
	e, ok := f.st.get(k)
	f.mu.RUnlock()
	if !ok {
		return nil, at, nil
	}
	return e.at(rev), at, nil
}

// List returns the live objects under p at one revision, in key order, so
// that paging with StartAfter at a fixed Revision yields an exact snapshot
// across pages. Counting Remaining walks the rest of the prefix, which is
// what Kubernetes' remainingItemCount needs. The read lock is held for the
// walk, so very large lists delay the next apply by the walk's length.
func (f *FSM) List(p Prefix, opts ListOptions) (ListResult, error) {
	prefix := p.String()
	f.mu.RLock()
	defer f.mu.RUnlock()
	at, err := f.checkRevLocked(opts.Revision)
	if err != nil {
		return ListResult{}, err
	}
	res := ListResult{Revision: at}
	if opts.Limit > 0 {
		res.KVs = make([]*KV, 0, min(opts.Limit, 1024))
	}
	f.st.ascendPrefix(prefix, opts.StartAfter, func(e entry) bool {
		kv := e.at(opts.Revision)
		if kv == nil {
			return true
		}
		if opts.Limit > 0 && len(res.KVs) >= opts.Limit {
			res.More = true
			res.Remaining++
			return true
		}
		res.KVs = append(res.KVs, kv)
		return true
	})
	return res, nil
}

// Count is the number of live objects under p at the latest revision, for
// metrics and quota; it walks the prefix.
func (f *FSM) Count(p Prefix) int {
	prefix := p.String()
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	f.st.ascendPrefix(prefix, "", func(e entry) bool {
		if e.latest() != nil {
			n++
		}
		return true
	})
	return n
}

// AppliedIndex is the index of the last applied log entry: the newest
// revision readable here, and the resourceVersion of a list at "latest".
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.applied
}

// HistoryBytes is the size of the retained values that are no longer live:
// the MVCC history a compaction can drop. It is cheap (a counter).
func (f *FSM) HistoryBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.history
}

// CompactTargetForBytes returns the lowest revision at which a compaction
// leaves at most maxBytes of history, or 0 if HistoryBytes is within
// maxBytes already. The leader's compactor proposes it through the log, so
// that every node drops the same history: the fsm never drops history by
// itself. It walks every key under the read lock (delaying applies by the
// walk), so callers check HistoryBytes first.
func (f *FSM) CompactTargetForBytes(maxBytes int64) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.compactTargetForBytes(maxBytes)
}

// CompactedRevision is the oldest revision still readable; reads and watches
// from before it must be answered with 410 Gone.
func (f *FSM) CompactedRevision() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.compacted
}

// WaitApplied blocks until index has been applied and every listener has
// been told about it, or ctx is done (returning ctx.Err()). It is how a read
// at resourceVersion N, or after a read index, waits for this node to catch
// up. Waiting is cheap (one channel per distinct index, freed when its last
// waiter gives up) and the apply path never blocks on waiters.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	ch, abandon := f.waiter.wait(index)
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		abandon()
		return ctx.Err()
	}
}

// Subscribe adds l to the applied stream (see Listener for its contract).
// Listeners are called in subscription order, on the apply goroutine,
// after the changes are visible to readers; they may call the read methods
// but must never call Apply, ApplyBatch or Restore. cancel removes l; it is
// idempotent and safe to call at any time, including from inside l. A
// subscriber that needs history first subscribes, then reads, and drops
// what overlaps, so no event falls between the two.
func (f *FSM) Subscribe(l Listener) (cancel func()) {
	return f.listeners.add(l)
}

func (f *FSM) checkRevLocked(rev uint64) (uint64, error) {
	at, err := f.st.checkRev(rev)
	switch err {
	case ErrCompacted:
		return 0, fmt.Errorf("%w: revision %d is older than compacted revision %d", err, rev, f.st.compacted)
	case ErrFutureRevision:
		return 0, fmt.Errorf("%w: revision %d is newer than applied index %d", err, rev, f.st.applied)
	}
	return at, err
}

// listenerSet is a copy-on-write list: the apply path loads it without a
// lock, and Subscribe/cancel replace it under mu, so they never wait for,
// or deadlock with, a listener that is running.
type listenerSet struct {
	mu     sync.Mutex
	nextID uint64
	cur    atomic.Pointer[[]subscription]
}

type subscription struct {
	id uint64
	l  Listener
}

func (s *listenerSet) load() []subscription {
	if p := s.cur.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *listenerSet) add(l Listener) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := s.nextID
	old := s.load()
	next := append(old[:len(old):len(old)], subscription{id: id, l: l})
	s.cur.Store(&next)
	return func() { s.remove(id) }
}

func (s *listenerSet) remove(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.load()
	next := make([]subscription, 0, len(old))
	for _, sub := range old {
		if sub.id != id {
			next = append(next, sub)
		}
	}
	if len(next) != len(old) {
		s.cur.Store(&next)
	}
}
