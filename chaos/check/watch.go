package check

import (
	"fmt"

	"github.com/trustplane/trustplane/chaos/history"
)

// Watch checks every node's watch streams, ConfigMaps and CSRs alike:
//
//   - within a session, events come in strictly increasing RV order, each
//     above the session's StartRV; a bookmark never goes below the last RV
//     delivered (it may repeat it);
//   - no RV is delivered twice to one node, within or across sessions;
//   - session k+1 starts at the last RV session k delivered (its StartRV
//     when it delivered nothing), unless session k ended "gone" (410): the
//     next one starts afresh, which is reported as Info;
//   - no gap: every reference-log entry in a session's (StartRV, last
//     delivered] is in that session;
//   - all sources agree about each RV (same type, key and value);
//   - every event belongs to a recorded session.
func Watch(h *history.History) Result {
	c := newCollector("watch")
	for _, res := range []history.Resource{history.ConfigMaps, history.CSRs} {
		ref := buildRef(h, res)
		for _, s := range ref.conflicts {
			c.violate("%s: sources disagree at %s", res, s)
		}
		sessions := sessionsOf(h, res)
		for _, node := range sortedKeys(sessions) {
			c.watchNode(res, node, sessions[node], ref)
		}
	}
	return c.result()
}

func (c *collector) watchNode(res history.Resource, node string, ss []*session, ref *refLog) {
	seen := map[uint64]int{} // non-bookmark RV -> session that delivered it
	var prev *session
	for _, s := range ss {
		name := fmt.Sprintf("%s %s session %d", node, res, s.key.session)
		if s.rec == nil {
			c.violate("%s: %d events of a session that was never recorded", name, len(s.events))
			prev = nil
			continue
		}
		if prev != nil {
			switch {
			case prev.gone:
				c.info("%s: starts afresh at rv %d after session %d ended gone", name, s.rec.StartRV, prev.key.session)
			case s.rec.StartRV != prev.last:
				c.violate("%s: resumed from rv %d, but session %d last delivered rv %d", name, s.rec.StartRV, prev.key.session, prev.last)
			}
		}
		if s.gone {
			c.info("%s: ended gone (410) at start rv %d", name, s.rec.StartRV)
		}
		last, lastBookmark := s.rec.StartRV, false
		delivered := map[uint64]bool{}
		for _, e := range s.events {
			if e.Type == history.Bookmark {
				if e.RV < last {
					c.violate("%s: bookmark rv %d after rv %d went backwards", name, e.RV, last)
					continue
				}
				last, lastBookmark = e.RV, true
				continue
			}
			if other, dup := seen[e.RV]; dup {
				c.violate("%s: rv %d (%s %s) delivered twice (first in session %d)", name, e.RV, e.Type, e.Key, other)
				continue
			}
			seen[e.RV] = s.key.session
			delivered[e.RV] = true
			switch {
			case e.RV <= s.rec.StartRV:
				c.violate("%s: rv %d (%s %s) not above the session's start rv %d", name, e.RV, e.Type, e.Key, s.rec.StartRV)
			case e.RV < last || (e.RV == last && lastBookmark):
				c.violate("%s: rv %d (%s %s) out of order after rv %d", name, e.RV, e.Type, e.Key, last)
			default:
				last, lastBookmark = e.RV, false
			}
		}
		for _, rv := range ref.between(s.rec.StartRV, s.last) {
			if !delivered[rv] {
				c.violate("%s: gap: rv %d (%s) is in its range (%d, %d] but was not delivered", name, rv, ref.byRV[rv], s.rec.StartRV, s.last)
			}
		}
		prev = s
	}
}
