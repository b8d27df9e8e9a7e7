package check

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

func linearizability(h *history.History) Result {
	r, _ := Linearizability(h, 30*time.Second)
	return r
}

func TestLinearizability(t *testing.T) {
	unknownV3 := func(h *history.History) {
		h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.Update, Key: "a", Value: "v3", ExpectRV: 4, Outcome: history.Unknown, Code: 504, Call: ms(200), Return: ms(210)})
	}
	runCases(t, linearizability, []checkerCase{
		{name: "correct history passes"},
		{name: "stale linearizable read after a newer write returned", want: "key a:",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.Get, Key: "a", Outcome: history.OK, Exists: true, Read: "v1", RV: 2, Call: ms(200), Return: ms(210)})
			}},
		{name: "stale read names the offending op", want: "op 12 get(a) -> \"v1\" @2",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.Get, Key: "a", Outcome: history.OK, Exists: true, Read: "v1", RV: 2, Call: ms(200), Return: ms(210)})
			}},
		{name: "list still shows a key after its delete returned", want: "key b:",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.List, Outcome: history.OK, RV: 6, Call: ms(200), Return: ms(210),
					Items: map[string]history.Item{"a": {Value: "v2", RV: 4}, "b": {Value: "w1", RV: 5}}})
			}},
		{name: "list missing a key that exists", want: "key a:",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.List, Outcome: history.OK, RV: 6, Call: ms(200), Return: ms(210)})
			}},
		{name: "update acknowledged against a precondition the key never had", want: "key a:",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 2).ExpectRV = 3 }},
		{name: "write acknowledged at an RV not above the key's", want: "key a:",
			mutate: func(t *testing.T, h *history.History) {
				o := op(t, h, 2)
				o.RV, o.ExpectRV = 2, 0
				op(t, h, 3).RV = 2
				for _, id := range []int64{5, 7, 8} {
					it := op(t, h, id).Items["a"]
					if it.RV != 0 {
						op(t, h, id).Items["a"] = history.Item{Value: "v2", RV: 2}
					}
				}
			}},
		{name: "local reads are not held to linearizability",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.Get, Key: "a", Local: true, Outcome: history.OK, Exists: true, Read: "v1", RV: 2, Call: ms(200), Return: ms(210)})
			}},
		{name: "fail writes are dropped",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.Create, Key: "a", Value: "dup", Outcome: history.Fail, Code: 409, Call: ms(200), Return: ms(210)})
			}},
		{name: "unknown write found in the log is accepted as applied", info: "1 resolved applied, 0 resolved not applied, 0 left open",
			mutate: func(t *testing.T, h *history.History) {
				o := op(t, h, 2)
				o.Outcome, o.Code, o.RV = history.Unknown, 504, 0
			}},
		{name: "unknown write absent from a complete log is accepted as not applied", info: "0 resolved applied, 1 resolved not applied, 0 left open",
			mutate: func(t *testing.T, h *history.History) { unknownV3(h) }},
		{name: "unresolved unknown write is accepted when later reads do not see it", info: "0 resolved applied, 0 resolved not applied, 1 left open",
			mutate: func(t *testing.T, h *history.History) {
				unknownV3(h)
				h.Sessions = nil // no coverage: the log cannot prove it absent
				h.Ops = append(h.Ops, history.Op{ID: 13, Client: 0, Kind: history.Get, Key: "a", Outcome: history.OK, Exists: true, Read: "v2", RV: 4, Call: ms(220), Return: ms(230)})
			}},
		{name: "unresolved unknown write still cannot excuse an impossible read", want: "key a:",
			mutate: func(t *testing.T, h *history.History) {
				unknownV3(h)
				h.Sessions = nil
				h.Ops = append(h.Ops, history.Op{ID: 13, Client: 0, Kind: history.Get, Key: "a", Outcome: history.OK, Exists: true, Read: "v1", RV: 2, Call: ms(220), Return: ms(230)})
			}},
		{name: "unresolved unknown create is accepted as not applied when a later create of the key succeeds",
			mutate: func(t *testing.T, h *history.History) {
				h.Sessions = nil
				h.Ops = append(h.Ops,
					history.Op{ID: 12, Client: 3, Kind: history.Create, Key: "z", Value: "z1", Outcome: history.Unknown, Call: ms(200), Return: ms(210)},
					history.Op{ID: 13, Client: 0, Kind: history.Create, Key: "z", Value: "z2", Outcome: history.OK, RV: 20, Call: ms(220), Return: ms(230)})
			}},
	})
}

func TestLinearizabilityVisualisation(t *testing.T) {
	h := baseHistory()
	h.Ops = append(h.Ops, history.Op{ID: 12, Client: 3, Kind: history.Get, Key: "a", Outcome: history.OK, Exists: true, Read: "v1", RV: 2, Call: ms(200), Return: ms(210)})
	r, vis := Linearizability(h, 30*time.Second)
	if r.OK || vis == nil {
		t.Fatalf("want a violation with a visual, got %s, visual %v", r, vis)
	}
	if len(vis.Keys) != 1 || vis.Keys[0] != "a" {
		t.Fatalf("want only key a drawn, got %v", vis.Keys)
	}
	var b bytes.Buffer
	if err := vis.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if !strings.Contains(html, "<html") || !strings.Contains(html, "op 12 get(a)") {
		t.Fatalf("visualisation lacks html or the op description (%d bytes)", len(html))
	}
	var none *Visual
	if err := none.WriteHTML(&b); !errors.Is(err, ErrNoVisual) {
		t.Fatalf("nil visual: want ErrNoVisual, got %v", err)
	}
}

func TestLinearizabilityTimeoutIsInconclusive(t *testing.T) {
	r, vis := Linearizability(baseHistory(), -1)
	if r.OK || !strings.HasPrefix(r.Skipped, "inconclusive") || vis != nil {
		t.Fatalf("want inconclusive and not OK, got %s", r)
	}
}
