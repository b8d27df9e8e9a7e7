package check

import (
	"sort"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

// ackedWrite is an OK write's place in time and in the log.
type ackedWrite struct {
	id    int64
	key   string
	ret   int64
	rvLow uint64 // the write is at this RV or above
}

// prefixMax indexes writes by Return so "the highest RV among writes that
// returned before t" is one binary search.
type prefixMax struct {
	ws  []ackedWrite
	top []int // top[i]: index in ws of the highest rvLow among ws[:i+1]
}

func newPrefixMax(ws []ackedWrite) *prefixMax {
	sort.Slice(ws, func(i, j int) bool { return ws[i].ret < ws[j].ret })
	p := &prefixMax{ws: ws, top: make([]int, len(ws))}
	for i := range ws {
		p.top[i] = i
		if i > 0 && ws[p.top[i-1]].rvLow >= ws[i].rvLow {
			p.top[i] = p.top[i-1]
		}
	}
	return p
}

// before is the write with the highest RV among those returned before t.
func (p *prefixMax) before(t int64) (ackedWrite, bool) {
	i := sort.Search(len(p.ws), func(i int) bool { return p.ws[i].ret >= t })
	if i == 0 {
		return ackedWrite{}, false
	}
	return p.ws[p.top[i-1]], true
}

// Staleness checks resourceVersion=0 (Local) reads against the servers'
// promise: a node serves them only while it heard from a leader within
// h.MaxStaleRead. With bound = MaxStaleRead + slack, for an OK Local read
// called at c:
//
//   - a list at RV R: every OK write that returned before c - bound has
//     RV <= R;
//   - a get that returned an object at RV R: no OK write of the same key
//     that returned before c - bound is above R (an update's RV; a delete's
//     own RV, or its precondition + 1 when it has none).
//
// A Local get that found nothing is not checked (it needs the key's delete
// history, not just a bound). Skipped when MaxStaleRead is not set.
func Staleness(h *history.History, slack time.Duration) Result {
	c := newCollector("staleness")
	if h.MaxStaleRead <= 0 {
		return c.skip("the history does not record --max-stale-read")
	}
	bound := int64(h.MaxStaleRead + slack)
	var all []ackedWrite
	perKey := map[string][]ackedWrite{}
	for i := range h.Ops {
		op := &h.Ops[i]
		if !isConfigMapWrite(op.Kind) || op.Outcome != history.OK {
			continue
		}
		w := ackedWrite{id: op.ID, key: op.Key, ret: op.Return, rvLow: op.RV}
		if op.RV == 0 && op.ExpectRV != 0 {
			w.rvLow = op.ExpectRV + 1
		}
		if w.rvLow == 0 {
			continue
		}
		all = append(all, w)
		perKey[op.Key] = append(perKey[op.Key], w)
	}
	global := newPrefixMax(all)
	keys := map[string]*prefixMax{}
	for k, ws := range perKey {
		keys[k] = newPrefixMax(ws)
	}
	checked := 0
	for i := range h.Ops {
		op := &h.Ops[i]
		if !op.Local || op.Outcome != history.OK {
			continue
		}
		cut := op.Call - bound
		switch op.Kind {
		case history.List:
			checked++
			if w, ok := global.before(cut); ok && w.rvLow > op.RV {
				c.violate("op %d local list on %s at rv %d is stale: op %d (%s) returned %v before it at rv %d, beyond the %v bound",
					op.ID, op.Node, op.RV, w.id, w.key, time.Duration(op.Call-w.ret), w.rvLow, time.Duration(bound))
			}
		case history.Get:
			if !op.Exists {
				continue
			}
			checked++
			p := keys[op.Key]
			if p == nil {
				continue
			}
			if w, ok := p.before(cut); ok && w.rvLow > op.RV {
				c.violate("op %d local get %s on %s returned %q@%d, superseded by op %d (rv %d) that returned %v before it, beyond the %v bound",
					op.ID, op.Key, op.Node, op.Read, op.RV, w.id, w.rvLow, time.Duration(op.Call-w.ret), time.Duration(bound))
			}
		}
	}
	c.info("%d local reads checked against a %v bound", checked, time.Duration(bound))
	return c.result()
}
