package check

import (
	"testing"

	"github.com/trustplane/trustplane/chaos/history"
)

func TestWatch(t *testing.T) {
	cm := history.ConfigMaps
	runCases(t, Watch, []checkerCase{
		{name: "correct streams pass"},
		{name: "gap: an event in the session's range was never delivered", want: "n3 configmaps session 0: gap: rv 5",
			mutate: func(t *testing.T, h *history.History) { dropEvents(h, at("n3", cm, 5)) }},
		{name: "duplicate within a session", want: "n1 configmaps session 0: rv 4 (MODIFIED a) delivered twice",
			mutate: func(t *testing.T, h *history.History) {
				i := eventIndex(t, h, at("n1", cm, 4))
				h.Events = append(h.Events[:i+1], h.Events[i:]...)
			}},
		{name: "duplicate across sessions", want: "n2 configmaps session 1: rv 4 (MODIFIED a) delivered twice (first in session 0)",
			mutate: func(t *testing.T, h *history.History) {
				e := h.Events[eventIndex(t, h, at("n2", cm, 4))]
				e.Session = 1
				i := eventIndex(t, h, at("n2", cm, 5))
				h.Events = append(h.Events[:i], append([]history.Event{e}, h.Events[i:]...)...)
			}},
		{name: "out of order events", want: "n1 configmaps session 0: rv 4 (MODIFIED a) out of order after rv 5",
			mutate: func(t *testing.T, h *history.History) {
				i, j := eventIndex(t, h, at("n1", cm, 4)), eventIndex(t, h, at("n1", cm, 5))
				h.Events[i], h.Events[j] = h.Events[j], h.Events[i]
			}},
		{name: "bad resume: StartRV is not the last delivered RV", want: "n2 configmaps session 1: resumed from rv 2, but session 0 last delivered rv 4",
			mutate: func(t *testing.T, h *history.History) {
				for i := range h.Sessions {
					if s := &h.Sessions[i]; s.Node == "n2" && s.Resource == cm && s.Session == 1 {
						s.StartRV = 2
					}
				}
			}},
		{name: "a bookmark repeating the last RV is fine",
			mutate: func(t *testing.T, h *history.History) {
				i := eventIndex(t, h, at("n2", cm, 4))
				h.Events = append(h.Events[:i+1], append([]history.Event{{Node: "n2", Resource: cm, Session: 0, Type: history.Bookmark, RV: 4}}, h.Events[i+1:]...)...)
			}},
		{name: "a bookmark promises every event below it: skipping one is a gap",
			mutate: func(t *testing.T, h *history.History) {
				i := eventIndex(t, h, at("n2", cm, 4))
				h.Events = append(h.Events[:i+1], append([]history.Event{{Node: "n2", Resource: cm, Session: 0, Type: history.Bookmark, RV: 5}}, h.Events[i+1:]...)...)
				dropEvents(h, at("n2", cm, 5)) // session 0's bookmark at 5 is a promise it saw rv 5 ...
				for i := range h.Sessions {
					if s := &h.Sessions[i]; s.Node == "n2" && s.Resource == cm && s.Session == 1 {
						s.StartRV = 5
					}
				}
			}, want: "n2 configmaps session 0: gap: rv 5"}, // ... which it broke
		{name: "bookmark goes backwards", want: "n1 configmaps session 0: bookmark rv 3 after rv 5 went backwards",
			mutate: func(t *testing.T, h *history.History) {
				i := eventIndex(t, h, at("n1", cm, 5))
				h.Events = append(h.Events[:i+1], append([]history.Event{{Node: "n1", Resource: cm, Session: 0, Type: history.Bookmark, RV: 3}}, h.Events[i+1:]...)...)
			}},
		{name: "event delivered after a bookmark at its own RV", want: "rv 5 (ADDED b) out of order after rv 5",
			mutate: func(t *testing.T, h *history.History) {
				i := eventIndex(t, h, at("n1", cm, 5))
				h.Events = append(h.Events[:i], append([]history.Event{{Node: "n1", Resource: cm, Session: 0, Type: history.Bookmark, RV: 5}}, h.Events[i:]...)...)
			}},
		{name: "first event not above the session's start", want: "n3 configmaps session 0: rv 2 (ADDED a) not above the session's start rv 2",
			mutate: func(t *testing.T, h *history.History) {
				for i := range h.Sessions {
					if s := &h.Sessions[i]; s.Node == "n3" && s.Resource == cm {
						s.StartRV = 2
					}
				}
			}},
		{name: "nodes disagree about one RV", want: "configmaps: sources disagree at rv 4",
			mutate: func(t *testing.T, h *history.History) { h.Events[eventIndex(t, h, at("n3", cm, 4))].Value = "other" }},
		{name: "CSR stream with a gap", want: "n2 certificatesigningrequests session 0: gap: rv 7",
			mutate: func(t *testing.T, h *history.History) { dropEvents(h, at("n2", history.CSRs, 7)) }},
		{name: "events of an unrecorded session", want: "n1 configmaps session 5: 1 events of a session that was never recorded",
			mutate: func(t *testing.T, h *history.History) {
				h.Events = append(h.Events, history.Event{Node: "n1", Resource: cm, Session: 5, Type: history.Bookmark, RV: 9})
			}},
		{name: "a gone session breaks coverage without a violation", info: "n3 configmaps session 1: ended gone (410)",
			mutate: func(t *testing.T, h *history.History) {
				h.Sessions = append(h.Sessions,
					history.Session{Node: "n3", Resource: cm, Session: 1, StartRV: 8, End: "gone"},
					history.Session{Node: "n3", Resource: cm, Session: 2, StartRV: 8, End: "run end"})
			}},
	})
}
