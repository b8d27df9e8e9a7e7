package check

import (
	"fmt"
	"sort"

	"github.com/trustplane/trustplane/chaos/history"
)

// CSRs checks that CertificateSigningRequests are signed exactly once:
//
//   - per CSR, every CSR watch event of every node and every final state
//     carries at most one distinct non-empty certificate digest (two
//     digests: signed twice);
//   - a CSR with an OK approval has a certificate in every readable
//     node's final state (the run settled before reading);
//   - a CSR with no OK or Unknown approval never carries a certificate.
//
// It is skipped when the run sent no CSR operations.
func CSRs(h *history.History) Result {
	c := newCollector("csr")
	approved := map[string]history.Outcome{} // best approval outcome per CSR
	sawCSR := false
	for i := range h.Ops {
		op := &h.Ops[i]
		switch op.Kind {
		case history.CSRCreate:
			sawCSR = true
		case history.CSRApprove:
			sawCSR = true
			if op.Outcome == history.OK || (op.Outcome == history.Unknown && approved[op.Key] != history.OK) {
				approved[op.Key] = op.Outcome
			}
		}
	}
	if !sawCSR {
		return c.skip("no CSR operations in the run")
	}
	type sighting struct {
		digest, where string
	}
	first := map[string]sighting{}
	reported := map[string]bool{}
	see := func(name, digest, where string) {
		if digest == "" {
			return
		}
		if _, ok := approved[name]; !ok && !reported[name+"!approved"] {
			reported[name+"!approved"] = true
			c.violate("csr %s: carries certificate %s (%s) but was never approved", name, digest, where)
		}
		f, ok := first[name]
		if !ok {
			first[name] = sighting{digest, where}
			return
		}
		if f.digest != digest && !reported[name+"!twice"] {
			reported[name+"!twice"] = true
			c.violate("csr %s: signed twice: certificate %s (%s) then %s (%s)", name, f.digest, f.where, digest, where)
		}
	}
	for _, e := range h.Events {
		if e.Resource == history.CSRs && e.Type != history.Bookmark {
			see(e.Key, e.Value, fmt.Sprintf("%s session %d rv %d", e.Node, e.Session, e.RV))
		}
	}
	live := liveNodes(h)
	for _, n := range live {
		st := h.Final[n]
		for _, name := range sortedKeys(st.CSRs) {
			see(name, st.CSRs[name], "final state of "+n)
		}
	}
	names := make([]string, 0, len(approved))
	for name, o := range approved {
		if o == history.OK {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		for _, n := range live {
			if h.Final[n].CSRs[name] == "" {
				c.violate("csr %s: approved (OK) but node %s's final state has no certificate", name, n)
			}
		}
	}
	c.info("%d CSRs approved OK, %d signed", len(names), len(first))
	return c.result()
}
