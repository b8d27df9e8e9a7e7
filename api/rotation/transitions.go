package rotation

import "fmt"

// Entry is one key of a root as a phase record holds it: its id, its
// phase, and when (Unix seconds, by the leader's clock; 0 unknown) it
// entered the phase and was made. A root keeps its entries newest first.
type Entry struct {
	ID      string `json:"id"`
	Phase   Phase  `json:"phase"`
	Since   int64  `json:"since,omitempty"`
	Created int64  `json:"created,omitempty"`
}

// The transitions below are the steps' effect on a root's entries, the
// same for every root: pure functions from the entries before a step to
// the entries after it, which the root writes in one compare-and-swap.
// None of them changes its input.

// First returns the newest entry in phase p, or nil.
func First(es []Entry, p Phase) *Entry {
	for i := range es {
		if es[i].Phase == p {
			return &es[i]
		}
	}
	return nil
}

// AddPending returns es with e, made at now, in front as the pending key.
// It refuses while a key is pending or retiring: one rotation at a time,
// and a finished one first.
func AddPending(es []Entry, id string, now int64) ([]Entry, error) {
	if p := First(es, Pending); p != nil {
		return nil, fmt.Errorf("%w: key %s is pending already", ErrNotReady, p.ID)
	}
	if r := First(es, Retiring); r != nil {
		return nil, fmt.Errorf("%w: key %s is still retiring; finish (or abort) the last rotation first", ErrNotReady, r.ID)
	}
	for _, e := range es {
		if e.ID == id {
			return nil, fmt.Errorf("%w: key %s is in the set already", ErrNotReady, id)
		}
	}
	out := append([]Entry{{ID: id, Phase: Pending, Since: now, Created: now}}, es...)
	return out, nil
}

// Promote makes the pending key active and every active key retiring.
func Promote(es []Entry, now int64) ([]Entry, *Entry, error) {
	p := First(es, Pending)
	if p == nil {
		return nil, nil, fmt.Errorf("%w: no pending key to promote; start first", ErrNoRotation)
	}
	out := clone(es)
	for i := range out {
		switch {
		case out[i].ID == p.ID:
			out[i].Phase, out[i].Since = Active, now
		case out[i].Phase == Active:
			out[i].Phase, out[i].Since = Retiring, now
		}
	}
	return out, p, nil
}

// Finish drops the retiring keys and returns them.
func Finish(es []Entry) (kept, removed []Entry) {
	for _, e := range es {
		if e.Phase == Retiring {
			removed = append(removed, e)
		} else {
			kept = append(kept, e)
		}
	}
	return kept, removed
}

// Abort undoes the rotation in progress: a pending key is dropped; after a
// promote, the newest retiring key is active again and the active one
// retiring. It says what it did.
func Abort(es []Entry, now int64) ([]Entry, string, error) {
	if p := First(es, Pending); p != nil {
		var out []Entry
		for _, e := range es {
			if e.ID != p.ID {
				out = append(out, e)
			}
		}
		return out, "pending key " + p.ID + " dropped", nil
	}
	old, cur := First(es, Retiring), First(es, Active)
	if old == nil || cur == nil {
		return nil, "", fmt.Errorf("%w: nothing to abort", ErrNoRotation)
	}
	out := clone(es)
	for i := range out {
		switch out[i].ID {
		case old.ID:
			out[i].Phase, out[i].Since = Active, now
		case cur.ID:
			out[i].Phase, out[i].Since = Retiring, now
		}
	}
	return out, "key " + old.ID + " is active again; " + cur.ID + " is retiring", nil
}

func clone(es []Entry) []Entry { return append([]Entry(nil), es...) }

// Keys renders entries as status keys; the active one issues.
func Keys(es []Entry) []Key {
	out := make([]Key, 0, len(es))
	for _, e := range es {
		k := Key{ID: e.ID, Phase: e.Phase, Issues: e.Phase == Active}
		if e.Since > 0 {
			k.Since = unix(e.Since)
		}
		if e.Created > 0 {
			k.Created = unix(e.Created)
		}
		out = append(out, k)
	}
	return out
}

// Keyed is an entry with its key's bytes, for a root whose record holds
// the keys themselves (the gossip key, the encryption data keys). The
// bytes never leave the record: status shows entries only.
type Keyed struct {
	Entry
	Key []byte `json:"key,omitempty"`
}

// EntriesOf are ks's entries, in order.
func EntriesOf(ks []Keyed) []Entry {
	out := make([]Entry, len(ks))
	for i, k := range ks {
		out[i] = k.Entry
	}
	return out
}

// WithEntries is ks with es's phases, keeping each key's bytes: keys not
// in es leave, and added brings the bytes of an entry ks lacks.
func WithEntries(ks []Keyed, es []Entry, added map[string][]byte) []Keyed {
	bytesOf := map[string][]byte{}
	for _, k := range ks {
		bytesOf[k.ID] = k.Key
	}
	for id, k := range added {
		bytesOf[id] = k
	}
	out := make([]Keyed, 0, len(es))
	for _, e := range es {
		out = append(out, Keyed{Entry: e, Key: bytesOf[e.ID]})
	}
	return out
}
