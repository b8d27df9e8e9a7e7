package check

import (
	"testing"

	"github.com/trustplane/trustplane/chaos/history"
)

func TestOutcomes(t *testing.T) {
	runCases(t, Outcomes, []checkerCase{
		{name: "correct history passes", info: "0 applied, 0 not applied, 0 unresolved"},
		{name: "acknowledged write in a covered range but nowhere in the log is lost", want: "op 12 create c=\"x1\" acknowledged at rv 9 is lost",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Kind: history.Create, Key: "c", Value: "x1", Outcome: history.OK, RV: 9, Call: ms(200), Return: ms(210)})
				h.Events[eventIndex(t, h, func(e history.Event) bool { return e.Node == "n1" && e.Type == history.Bookmark })].RV = 10
			}},
		{name: "acknowledged write outside coverage with no trace is unverified, not lost", info: "1 acknowledged writes unverified",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Kind: history.Create, Key: "c", Value: "x1", Outcome: history.OK, RV: 20, Call: ms(200), Return: ms(210)})
			}},
		{name: "acknowledged at one RV, logged at another", want: "op 1 create a=\"v1\" acknowledged at rv 3, but its value is at rv 2",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 1).RV = 3 }},
		{name: "acknowledged at an RV the log gives to another write", want: "but the log has MODIFIED a=\"v2\"",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 1).RV = 4 }},
		{name: "409 whose value shows up in the log", want: "op 4 create b=\"w1\" answered 409",
			mutate: func(t *testing.T, h *history.History) {
				o := op(t, h, 4)
				o.Outcome, o.Code, o.Reason, o.RV = history.Fail, 409, "AlreadyExists", 0
			}},
		{name: "acknowledged delete without a DELETED event in the covered range", want: "op 6 delete b (precondition rv 5) acknowledged, but no DELETED event",
			mutate: func(t *testing.T, h *history.History) {
				dropEvents(h, func(e history.Event) bool { return e.Type == history.Deleted })
			}},
		{name: "read of a value no write sent", want: "op 3 get returned a=\"ghost\" at rv 4, a value no write sent",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 3).Read = "ghost" }},
		{name: "list item at an RV the log gives to another key", want: "op 5 list returned b=\"w1\" at rv 4, but the log has MODIFIED a=\"v2\"",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 5).Items["b"] = history.Item{Value: "w1", RV: 4} }},
		{name: "one value seen at two RVs", want: "one value at two RVs",
			mutate: func(t *testing.T, h *history.History) { op(t, h, 3).RV = 3 }},
		{name: "unknown write whose value is in the log resolves to applied", info: "1 applied, 0 not applied, 0 unresolved",
			mutate: func(t *testing.T, h *history.History) {
				o := op(t, h, 2)
				o.Outcome, o.Code, o.RV = history.Unknown, 504, 0
			}},
		{name: "unknown write absent from a complete log resolves to not applied", info: "0 applied, 1 not applied, 0 unresolved",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Kind: history.Update, Key: "a", Value: "v3", ExpectRV: 4, Outcome: history.Unknown, Code: 504, Call: ms(200), Return: ms(210)})
			}},
		{name: "unknown write absent from an incomplete log stays unresolved", info: "0 applied, 0 not applied, 1 unresolved",
			mutate: func(t *testing.T, h *history.History) {
				h.Ops = append(h.Ops, history.Op{ID: 12, Kind: history.Update, Key: "a", Value: "v3", ExpectRV: 4, Outcome: history.Unknown, Code: 504, Call: ms(200), Return: ms(210)})
				for n, st := range h.Final {
					st.RV = 30 // someone saw rv 30; no watch reached it
					h.Final[n] = st
				}
			}},
	})
}
