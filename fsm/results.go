package fsm

// resultsKept is how many recent command results an FSM remembers for
// ResultAt. A proposer that lost leadership resolves its entry within
// seconds, while at most a few thousand entries apply. The KVs a result
// points to are versions the MVCC history holds anyway, unless compacted
// since, so the ring pins little of its own.
const resultsKept = 4096

// resultRing remembers the results of the most recent commands by log
// index. It is not state: it is neither snapshotted nor restored, and no
// apply reads it, so it cannot make two nodes diverge. FSM.mu guards it:
// apply writes it under the write lock it already holds.
type resultRing [resultsKept]struct {
	index uint64
	res   *Result
}

func (r *resultRing) put(index uint64, res *Result) {
	s := &r[index%resultsKept]
	s.index, s.res = index, res
}

func (r *resultRing) get(index uint64) *Result {
	if s := r[index%resultsKept]; s.index == index {
		return s.res
	}
	return nil
}

// ResultAt returns the result of the command this node applied at log
// index, or nil when it applied none there (a no-op or configuration
// entry, an index restored from a snapshot) or no longer remembers it.
//
// Why: a leader that appended a write and then lost leadership does not
// know whether the entry committed. Once its node has applied past the
// index and the entry there is still its own, this is the answer it would
// have given, so the client hears what really happened instead of a
// retryable error that would make it meet its own write.
func (f *FSM) ResultAt(index uint64) *Result {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.results.get(index)
}
