package fsm

import (
	"sort"

	"github.com/google/btree"
)

// btreeDegree is the fan-out of the key tree. 32 is google/btree's usual
// choice: shallow trees, and a copy-on-write after a Snapshot copies a
// handful of nodes per written key.
const btreeDegree = 32

// version is one retained revision of a key. kv is nil for a tombstone (the
// key was deleted at rev); otherwise kv.ModRevision == rev.
type version struct {
	rev uint64
	kv  *KV
}

// entry is one key's retained history, oldest first, with strictly
// increasing revisions. An entry is immutable once it is in the tree: a
// write builds a new versions slice (never appending into a shared backing
// array) and replaces the entry, so a Clone of the tree and readers that
// already hold a KV stay consistent.
type entry struct {
	key      string // Key.String()
	versions []version
}

func entryLess(a, b entry) bool { return a.key < b.key }

// at returns the version of e live at rev (rev==0: latest), or nil if the
// key had no live object then.
func (e entry) at(rev uint64) *KV {
	vs := e.versions
	if len(vs) == 0 {
		return nil
	}
	if rev == 0 || vs[len(vs)-1].rev <= rev {
		return vs[len(vs)-1].kv
	}
	// First version newer than rev; the one before it is live at rev.
	i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > rev })
	if i == 0 {
		return nil
	}
	return vs[i-1].kv
}

// latest is the live object, or nil if the key's newest version is a
// tombstone.
func (e entry) latest() *KV {
	if len(e.versions) == 0 {
		return nil
	}
	return e.versions[len(e.versions)-1].kv
}

// supersededBytes is the size of the values of e.versions[:n] that are no
// longer live: every live version but the newest one of the entry.
func (e entry) supersededBytes(n int) int64 {
	var b int64
	for i, v := range e.versions[:n] {
		if v.kv != nil && i < len(e.versions)-1 {
			b += int64(len(v.kv.Value))
		}
	}
	return b
}

// store is the MVCC state. It has no locking of its own: FSM guards it.
type store struct {
	tree      *btree.BTreeG[entry]
	applied   uint64
	compacted uint64
	// history is the size of the retained values that are not live (the
	// MVCC history a compaction can drop). It is derived from the tree,
	// so it is not part of a snapshot.
	history int64
}

func newStore() *store {
	return &store{tree: btree.NewG(btreeDegree, entryLess)}
}

func (s *store) get(k string) (entry, bool) {
	return s.tree.Get(entry{key: k})
}

// apply executes one decoded command at index and appends the events it
// produced to evs. It returns the command's Result. It does not advance
// s.applied: the caller does that for every log, decodable command or not.
func (s *store) apply(index uint64, c *Command, evs []Event) (*Result, []Event) {
	switch c.Op {
	case OpPut:
		return s.put(index, c, evs)
	case OpDelete:
		return s.del(index, c, evs)
	case OpCompact:
		s.compact(index, c.CompactRevision)
		return &Result{Revision: index}, evs
	default: // OpNoop; DecodeCommand rejects every other op
		return &Result{Revision: index}, evs
	}
}

// checkPreconditions returns the sentinel for the first failed
// precondition that applies to every op (ModRevision, then UID), given
// the live object cur (nil if none).
func checkPreconditions(c *Command, cur *KV) error {
	if c.ModRevision == 0 && c.MatchUID == "" {
		return nil
	}
	if cur == nil {
		return ErrNotFound
	}
	if c.ModRevision != 0 && cur.ModRevision != c.ModRevision {
		return ErrModRevisionMismatch
	}
	if c.MatchUID != "" && cur.UID != c.MatchUID {
		return ErrUIDMismatch
	}
	return nil
}

func (s *store) put(index uint64, c *Command, evs []Event) (*Result, []Event) {
	k := c.Key.String()
	e, _ := s.get(k)
	cur := e.latest()
	if c.MustNotExist && cur != nil {
		return &Result{Revision: index, Prev: cur, Err: ErrExists}, evs
	}
	if err := checkPreconditions(c, cur); err != nil {
		return &Result{Revision: index, Prev: cur, Err: err}, evs
	}
	create := index
	if cur != nil {
		create = cur.CreateRevision
	}
	kv := &KV{
		Key:            c.Key,
		Value:          c.Value,
		UID:            c.UID,
		CreateRevision: create,
		ModRevision:    index,
	}
	s.tree.ReplaceOrInsert(entry{key: k, versions: appendVersion(e.versions, version{rev: index, kv: kv})})
	if cur != nil {
		s.history += int64(len(cur.Value))
	}
	return &Result{Revision: index, KV: kv, Prev: cur},
		append(evs, Event{Type: EventPut, Revision: index, KV: kv, Prev: cur})
}

func (s *store) del(index uint64, c *Command, evs []Event) (*Result, []Event) {
	k := c.Key.String()
	e, _ := s.get(k)
	cur := e.latest()
	if cur == nil {
		return &Result{Revision: index, Err: ErrNotFound}, evs
	}
	if err := checkPreconditions(c, cur); err != nil {
		return &Result{Revision: index, Prev: cur, Err: err}, evs
	}
	s.tree.ReplaceOrInsert(entry{key: k, versions: appendVersion(e.versions, version{rev: index})})
	s.history += int64(len(cur.Value))
	gone := *cur
	gone.ModRevision = index
	return &Result{Revision: index, Prev: cur},
		append(evs, Event{Type: EventDelete, Revision: index, KV: &gone, Prev: cur})
}

// appendVersion returns a new slice: vs's backing array may be shared with
// a snapshot clone or a reader, so it is never written to.
func appendVersion(vs []version, v version) []version {
	return append(vs[:len(vs):len(vs)], v)
}

// compact drops history that no read at or after the new compacted revision
// can see. It is clamped to index (a compaction can never claim revisions
// not yet applied) and never moves the compacted revision backwards.
func (s *store) compact(index, rev uint64) {
	rev = min(rev, index)
	if rev <= s.compacted {
		return
	}
	s.compacted = rev

	// Collect changes first: the tree must not be modified while iterating.
	var replace []entry
	var drop []string
	s.tree.Ascend(func(e entry) bool {
		vs := e.versions
		// i: index of the newest version <= rev, or -1.
		i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > rev }) - 1
		if i < 0 {
			return true // all history is newer than rev
		}
		keep := i
		if vs[i].kv == nil {
			keep = i + 1 // a tombstone at or before rev is invisible to every allowed read
		}
		// Every version dropped is superseded: the newest live one is kept.
		s.history -= e.supersededBytes(keep)
		switch {
		case keep == 0:
			// nothing superseded
		case keep == len(vs):
			drop = append(drop, e.key)
		default:
			nv := make([]version, len(vs)-keep)
			copy(nv, vs[keep:])
			replace = append(replace, entry{key: e.key, versions: nv})
		}
		return true
	})
	for _, k := range drop {
		s.tree.Delete(entry{key: k})
	}
	for _, e := range replace {
		s.tree.ReplaceOrInsert(e)
	}
}

// checkRev validates a read revision and returns the revision the read is
// served at.
func (s *store) checkRev(rev uint64) (uint64, error) {
	if rev == 0 {
		return s.applied, nil
	}
	if rev > s.applied {
		return 0, ErrFutureRevision
	}
	if rev < s.compacted {
		return 0, ErrCompacted
	}
	return rev, nil
}

// ascendPrefix calls fn for every entry whose key starts with prefix and is
// strictly greater than after, in key order, until fn returns false.
func (s *store) ascendPrefix(prefix, after string, fn func(entry) bool) {
	start := prefix
	if after >= start {
		// after+"\x00" is the smallest string strictly greater than after.
		start = after + "\x00"
	}
	s.tree.AscendGreaterOrEqual(entry{key: start}, func(e entry) bool {
		if len(e.key) < len(prefix) || e.key[:len(prefix)] != prefix {
			return false
		}
		return fn(e)
	})
}

// compactTargetForBytes returns the lowest revision whose compaction leaves
// at most maxBytes of history (0 if the history is within it already). A
// superseded version is dropped by a compaction at or after the revision
// of the version that replaced it, so the answer is the replacing revision
// of the newest version that does not fit. It walks the whole tree.
func (s *store) compactTargetForBytes(maxBytes int64) uint64 {
	if s.history <= maxBytes {
		return 0
	}
	type drop struct {
		rev   uint64 // compacting at rev or later drops it
		bytes int64
	}
	var drops []drop
	s.tree.Ascend(func(e entry) bool {
		vs := e.versions
		for i := 0; i < len(vs)-1; i++ {
			if vs[i].kv != nil {
				drops = append(drops, drop{rev: vs[i+1].rev, bytes: int64(len(vs[i].kv.Value))})
			}
		}
		return true
	})
	// Newest first: keep as much recent history as fits.
	sort.Slice(drops, func(i, j int) bool { return drops[i].rev > drops[j].rev })
	var kept int64
	for _, d := range drops {
		kept += d.bytes
		if kept > maxBytes {
			return d.rev
		}
	}
	return 0
}
