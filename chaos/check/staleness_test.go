package check

import (
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

func staleness(h *history.History) Result { return Staleness(h, time.Second) }

func TestStaleness(t *testing.T) {
	localGet := func(call int64, read string, rv uint64) history.Op {
		return history.Op{ID: 12, Client: 3, Node: "n3", Kind: history.Get, Key: "a", Local: true, Outcome: history.OK, Exists: true, Read: read, RV: rv, Call: call, Return: call + ms(5)}
	}
	localList := func(call int64, rv uint64) history.Op {
		return history.Op{ID: 12, Client: 3, Node: "n3", Kind: history.List, Local: true, Outcome: history.OK, RV: rv, Call: call, Return: call + ms(5),
			Items: map[string]history.Item{"a": {Value: "v1", RV: 2}}}
	}
	runCases(t, staleness, []checkerCase{
		{name: "fresh local reads pass", info: "2 local reads checked against a 6s bound"},
		{name: "local get older than the bound", want: "op 12 local get a on n3 returned \"v1\"@2, superseded by op 2 (rv 4)",
			mutate: func(t *testing.T, h *history.History) { h.Ops = append(h.Ops, localGet(ms(10_000), "v1", 2)) }},
		{name: "old local get within the bound is allowed",
			mutate: func(t *testing.T, h *history.History) { h.Ops = append(h.Ops, localGet(ms(5_000), "v1", 2)) }},
		{name: "local list older than the bound", want: "op 12 local list on n3 at rv 2 is stale: op 6 (b)",
			mutate: func(t *testing.T, h *history.History) { h.Ops = append(h.Ops, localList(ms(10_000), 2)) }},
		{name: "old local list within the bound is allowed",
			mutate: func(t *testing.T, h *history.History) { h.Ops = append(h.Ops, localList(ms(1_000), 2)) }},
		{name: "slack widens the bound",
			mutate: func(t *testing.T, h *history.History) { h.Ops = append(h.Ops, localList(ms(5_500), 2)) }},
		{name: "linearizable reads are not held to the bound",
			mutate: func(t *testing.T, h *history.History) {
				o := localGet(ms(10_000), "v2", 4)
				o.Local, o.Read, o.RV = false, "v1", 2
				h.Ops = append(h.Ops, o)
			}},
	})
}

func TestStalenessSkippedWithoutBound(t *testing.T) {
	h := baseHistory()
	h.MaxStaleRead = 0
	if r := Staleness(h, time.Second); r.OK || r.Skipped == "" {
		t.Fatalf("want skipped and not OK, got %s", r)
	}
}

func TestStalenessWithoutSlackIsStricter(t *testing.T) {
	h := baseHistory()
	h.Ops = append(h.Ops, history.Op{ID: 12, Node: "n3", Kind: history.List, Local: true, Outcome: history.OK, RV: 2, Call: ms(5_500), Return: ms(5_505)})
	assertResult(t, Staleness(h, time.Second), "", "")
	assertResult(t, Staleness(h, 0), "op 12 local list on n3 at rv 2 is stale", "")
}
