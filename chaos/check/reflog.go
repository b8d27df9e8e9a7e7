package check

import (
	"fmt"
	"sort"

	"github.com/trustplane/trustplane/chaos/history"
)

// refEntry is what the reference log holds at one RV.
type refEntry struct {
	// Type is ADDED, MODIFIED or DELETED; "" for an item of a final state
	// (a create or an update, which one is not known).
	Type  history.EventType
	Key   string
	Value string
	// From names the source, for reports.
	From string
}

func (e refEntry) deleted() bool { return e.Type == history.Deleted }

// agree reports whether two sources describe the same write.
func agree(a, b refEntry) bool {
	if a.Key != b.Key || a.deleted() != b.deleted() {
		return false
	}
	if a.Type != "" && b.Type != "" && a.Type != b.Type {
		return false
	}
	if a.deleted() && (a.Value == "" || b.Value == "") {
		return true
	}
	return a.Value == b.Value
}

func (e refEntry) String() string {
	t := string(e.Type)
	if t == "" {
		t = "PUT"
	}
	return fmt.Sprintf("%s %s=%q (%s)", t, e.Key, e.Value, e.From)
}

// span is the RV range (lo, hi].
type span struct{ lo, hi uint64 }

// spans is a sorted set of disjoint, non-adjacent spans.
type spans []span

func mergeSpans(in []span) spans {
	sort.Slice(in, func(i, j int) bool { return in[i].lo < in[j].lo })
	var out spans
	for _, s := range in {
		if s.hi <= s.lo {
			continue
		}
		if n := len(out); n > 0 && s.lo <= out[n-1].hi {
			if s.hi > out[n-1].hi {
				out[n-1].hi = s.hi
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// covers reports whether (lo, hi] lies inside one span.
func (ss spans) covers(lo, hi uint64) bool {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].hi >= hi })
	return i < len(ss) && ss[i].lo <= lo
}

// has reports whether rv lies in some span.
func (ss spans) has(rv uint64) bool { return rv > 0 && ss.covers(rv-1, rv) }

// sessKey names one watch session.
type sessKey struct {
	node    string
	res     history.Resource
	session int
}

// session is one watch session with the events it delivered, in order.
type session struct {
	key      sessKey
	rec      *history.Session // nil when events name a session never recorded
	events   []history.Event
	last     uint64 // last RV delivered (event or bookmark); StartRV if none
	gone     bool
	lastSeen bool // some event or bookmark was delivered
}

// sessionsOf groups the sessions of one resource by node, each node's
// sessions sorted by number.
func sessionsOf(h *history.History, res history.Resource) map[string][]*session {
	byKey := map[sessKey]*session{}
	for i := range h.Sessions {
		s := &h.Sessions[i]
		if s.Resource != res {
			continue
		}
		k := sessKey{s.Node, s.Resource, s.Session}
		byKey[k] = &session{key: k, rec: s, last: s.StartRV, gone: s.End == "gone"}
	}
	for _, e := range h.Events {
		if e.Resource != res {
			continue
		}
		k := sessKey{e.Node, e.Resource, e.Session}
		s := byKey[k]
		if s == nil {
			s = &session{key: k}
			byKey[k] = s
		}
		s.events = append(s.events, e)
		if e.RV > s.last {
			s.last = e.RV
		}
		s.lastSeen = true
	}
	out := map[string][]*session{}
	for _, s := range byKey {
		out[s.key.node] = append(out[s.key.node], s)
	}
	for _, ss := range out {
		sort.Slice(ss, func(i, j int) bool { return ss[i].key.session < ss[j].key.session })
	}
	return out
}

// refLog is the reference log of one resource.
type refLog struct {
	byRV map[uint64]refEntry
	rvs  []uint64 // sorted
	// conflicts are sources that disagree about one RV.
	conflicts []string
	// cover is where the log is complete: the union of the recorded
	// sessions' (StartRV, last delivered].
	cover spans
	// maxRV is the highest RV any source names (final states' list RVs
	// included).
	maxRV uint64
	// deletes maps each key to the sorted RVs of its DELETED entries.
	deletes map[string][]uint64
}

// buildRef builds the reference log of res from the watch events and, for
// ConfigMaps, the final states.
func buildRef(h *history.History, res history.Resource) *refLog {
	r := &refLog{byRV: map[uint64]refEntry{}}
	add := func(rv uint64, e refEntry) {
		if rv > r.maxRV {
			r.maxRV = rv
		}
		old, ok := r.byRV[rv]
		if !ok {
			r.byRV[rv] = e
			r.rvs = append(r.rvs, rv)
			return
		}
		if !agree(old, e) {
			r.conflicts = append(r.conflicts, fmt.Sprintf("rv %d: %s vs %s", rv, old, e))
			return
		}
		if old.Type == "" && e.Type != "" {
			r.byRV[rv] = e // prefer the typed watch event
		}
	}
	for _, e := range h.Events {
		if e.Resource != res || e.Type == history.Bookmark {
			continue
		}
		add(e.RV, refEntry{Type: e.Type, Key: e.Key, Value: e.Value,
			From: fmt.Sprintf("%s session %d", e.Node, e.Session)})
	}
	if res == history.ConfigMaps {
		for _, n := range liveNodes(h) {
			st := h.Final[n]
			if st.RV > r.maxRV {
				r.maxRV = st.RV
			}
			for _, k := range sortedKeys(st.ConfigMaps) {
				it := st.ConfigMaps[k]
				add(it.RV, refEntry{Key: k, Value: it.Value, From: "final state of " + n})
			}
		}
	}
	sort.Slice(r.rvs, func(i, j int) bool { return r.rvs[i] < r.rvs[j] })
	r.deletes = map[string][]uint64{}
	for _, rv := range r.rvs {
		if e := r.byRV[rv]; e.deleted() {
			r.deletes[e.Key] = append(r.deletes[e.Key], rv)
		}
	}
	var cov []span
	for _, ss := range sessionsOf(h, res) {
		for _, s := range ss {
			if s.rec != nil {
				cov = append(cov, span{s.rec.StartRV, s.last})
			}
		}
	}
	r.cover = mergeSpans(cov)
	return r
}

// between returns the sorted RVs in (lo, hi].
func (r *refLog) between(lo, hi uint64) []uint64 {
	i := sort.Search(len(r.rvs), func(i int) bool { return r.rvs[i] > lo })
	j := sort.Search(len(r.rvs), func(i int) bool { return r.rvs[i] > hi })
	if i >= j {
		return nil
	}
	return r.rvs[i:j]
}

// deletedAfter reports whether the log deletes key at an RV above rv.
func (r *refLog) deletedAfter(key string, rv uint64) bool {
	ds := r.deletes[key]
	i := sort.Search(len(ds), func(i int) bool { return ds[i] > rv })
	return i < len(ds)
}

// complete reports whether the log is complete from the run's start to the
// highest RV anyone saw.
func (r *refLog) complete(h *history.History) bool {
	return r.maxRV > 0 && r.cover.covers(h.StartRV, r.maxRV)
}

// observations maps every value seen anywhere (log, reads, final states) to
// the RV it was seen at; a value seen at two RVs is reported.
type observations struct {
	rv        map[string]uint64
	where     map[string]string
	conflicts []string
}

func observe(h *history.History, ref *refLog) *observations {
	o := &observations{rv: map[string]uint64{}, where: map[string]string{}}
	add := func(v string, rv uint64, where string) {
		if v == "" {
			return
		}
		if old, ok := o.rv[v]; ok {
			if old != rv {
				o.conflicts = append(o.conflicts, fmt.Sprintf("value %q seen at rv %d (%s) and rv %d (%s)", v, old, o.where[v], rv, where))
			}
			return
		}
		o.rv[v] = rv
		o.where[v] = where
	}
	for _, rv := range ref.rvs {
		if e := ref.byRV[rv]; !e.deleted() {
			add(e.Value, rv, e.From)
		}
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		if !readOK(op) {
			continue
		}
		switch op.Kind {
		case history.Get:
			if op.Exists {
				add(op.Read, op.RV, fmt.Sprintf("get op %d", op.ID))
			}
		case history.List:
			for _, k := range sortedKeys(op.Items) {
				add(op.Items[k].Value, op.Items[k].RV, fmt.Sprintf("list op %d", op.ID))
			}
		}
	}
	return o
}
