package check

import (
	"testing"

	"github.com/trustplane/trustplane/chaos/history"
)

func TestCSRs(t *testing.T) {
	runCases(t, CSRs, []checkerCase{
		{name: "signed once after approval passes", info: "1 CSRs approved OK, 1 signed"},
		{name: "certificate changed: signed twice", want: "csr c1: signed twice: certificate d1",
			mutate: func(t *testing.T, h *history.History) {
				h.Events = append(h.Events, history.Event{Node: "n2", Resource: history.CSRs, Session: 0, Type: history.Modified, Key: "c1", Approved: true, Value: "d2", RV: 9})
			}},
		{name: "final state carries another certificate", want: "then d2 (final state of n3)",
			mutate: func(t *testing.T, h *history.History) { h.Final["n3"].CSRs["c1"] = "d2" }},
		{name: "certificate without any approval", want: "csr c1: carries certificate d1",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = h.Ops[:len(h.Ops)-2]
				h.Ops = append(h.Ops, history.Op{ID: 11, Kind: history.Get, Key: "b", Outcome: history.Fail, Code: 404})
			}},
		{name: "failed approval does not count as approval", want: "but was never approved",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 10).Outcome = history.Fail }},
		{name: "approved but unsigned on a node after settle", want: "csr c1: approved (OK) but node n3's final state has no certificate",
			mutate: func(t *testing.T, h *history.History) { h.Final["n3"].CSRs["c1"] = "" }},
	})
	t.Run("unknown approval may have been applied", func(t *testing.T) {
		h := baseHistory()
		op(t, h, 10).Outcome = history.Unknown
		assertResult(t, CSRs(h), "", "0 CSRs approved OK, 1 signed")
	})
}

func TestCSRsSkippedWithoutCSROps(t *testing.T) {
	h := baseHistory()
	var ops []history.Op
	for _, o := range h.Ops {
		if o.Kind != history.CSRCreate && o.Kind != history.CSRApprove {
			ops = append(ops, o)
		}
	}
	h.Ops = ops
	if r := CSRs(h); r.OK || r.Skipped == "" {
		t.Fatalf("want skipped and not OK, got %s", r)
	}
}
