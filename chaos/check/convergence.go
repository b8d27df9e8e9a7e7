package check

import (
	"github.com/trustplane/trustplane/chaos/history"
)

// Convergence checks the nodes' final states, read after the run settled:
//
//   - every node of the run could be read (a node that could not is a
//     violation: the run settles before reading);
//   - all nodes hold the same ConfigMaps (key, value, RV) and the same CSR
//     certificate digests as the first readable node;
//   - each node's ConfigMaps are the reference log's last word per key at
//     or below the node's list RV: a key whose last entry is a DELETED is
//     absent, any other key holds that entry's value at that RV.
func Convergence(h *history.History) Result {
	c := newCollector("convergence")
	for _, n := range nodesOf(h) {
		st, ok := h.Final[n]
		switch {
		case !ok:
			c.violate("node %s: no final state recorded", n)
		case st.Err != "":
			c.violate("node %s: final state could not be read: %s", n, st.Err)
		}
	}
	live := liveNodes(h)
	if len(live) == 0 {
		return c.skip("no node's final state could be read")
	}
	base := live[0]
	bs := h.Final[base]
	for _, n := range live[1:] {
		st := h.Final[n]
		for _, k := range unionKeys(bs.ConfigMaps, st.ConfigMaps) {
			a, aok := bs.ConfigMaps[k]
			b, bok := st.ConfigMaps[k]
			if aok != bok || a != b {
				c.violate("configmap %s: node %s has %s, node %s has %s", k, base, itemString(a, aok), n, itemString(b, bok))
			}
		}
		for _, k := range unionKeys(bs.CSRs, st.CSRs) {
			a, aok := bs.CSRs[k]
			b, bok := st.CSRs[k]
			if aok != bok || a != b {
				c.violate("csr %s: node %s has digest %q (present %t), node %s has %q (present %t)", k, base, a, aok, n, b, bok)
			}
		}
	}
	ref := buildRef(h, history.ConfigMaps)
	for _, n := range live {
		st := h.Final[n]
		lastRV := map[string]uint64{}
		for _, rv := range ref.between(h.StartRV, max(st.RV, h.StartRV)) {
			lastRV[ref.byRV[rv].Key] = rv
		}
		for _, k := range unionKeys(lastRV, st.ConfigMaps) {
			it, has := st.ConfigMaps[k]
			rv, logged := lastRV[k]
			if !logged {
				continue // no log entry at or below the node's RV: nothing to hold it to
			}
			e := ref.byRV[rv]
			switch {
			case e.deleted() && has:
				c.violate("node %s: configmap %s is %s, but the log deleted it at rv %d (%s)", n, k, itemString(it, true), rv, e.From)
			case !e.deleted() && !has:
				c.violate("node %s: configmap %s is absent, but the log's last entry is rv %d %s", n, k, rv, e)
			case !e.deleted() && (it.RV != rv || it.Value != e.Value):
				c.violate("node %s: configmap %s is %s, but the log's last entry is rv %d %s", n, k, itemString(it, true), rv, e)
			}
		}
	}
	return c.result()
}

func itemString(it history.Item, ok bool) string {
	if !ok {
		return "nothing"
	}
	return quoteAt(it.Value, it.RV)
}

func unionKeys[A, B any](a map[string]A, b map[string]B) []string {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return sortedKeys(m)
}
