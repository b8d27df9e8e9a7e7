package check

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

func ms(n int64) int64 { return n * int64(time.Millisecond) }

// baseHistory is a small correct run on three nodes:
//
//	rv 2  create a=v1        (op 1)
//	rv 3  csr-create c1      (op 9)
//	rv 4  update a=v2 if 2   (op 2)
//	rv 5  create b=w1        (op 4)
//	rv 6  delete b if 5      (op 6, answer carries no RV)
//	rv 7  csr-approve c1     (op 10)
//	rv 8  c1 signed "d1"
//
// n1 and n3 watch ConfigMaps in one session; n2 in two (cut after rv 4,
// resumed from 4). Every node ends with a=v2@4 and c1 signed d1.
func baseHistory() *history.History {
	h := &history.History{
		Nodes: []string{"n1", "n2", "n3"}, StartRV: 1, MaxStaleRead: 5 * time.Second, End: ms(300),
		Ops: []history.Op{
			{ID: 12, Client: 3, Node: "n1", Kind: history.TokenMint, Key: "t1", Read: "k1", Outcome: history.OK, Call: ms(0), Return: ms(1)},
			{ID: 13, Client: 3, Node: "n2", Kind: history.TokenReview, Key: "t1", Read: "k1", Exists: true, Outcome: history.OK, Call: ms(2), Return: ms(3)},
			{ID: 14, Client: 3, Node: "n3", Kind: history.TokenVerify, Key: "t1", Read: "k1", Exists: true, Outcome: history.OK, Call: ms(4), Return: ms(5)},
			{ID: 1, Client: 0, Node: "n1", Kind: history.Create, Key: "a", Value: "v1", Outcome: history.OK, RV: 2, Call: ms(0), Return: ms(10)},
			{ID: 9, Client: 2, Node: "n1", Kind: history.CSRCreate, Key: "c1", Outcome: history.OK, RV: 3, Call: ms(11), Return: ms(15)},
			{ID: 2, Client: 1, Node: "n2", Kind: history.Update, Key: "a", Value: "v2", ExpectRV: 2, Outcome: history.OK, RV: 4, Call: ms(20), Return: ms(30)},
			{ID: 3, Client: 0, Node: "n3", Kind: history.Get, Key: "a", Outcome: history.OK, Exists: true, Read: "v2", RV: 4, Call: ms(40), Return: ms(50)},
			{ID: 4, Client: 1, Node: "n1", Kind: history.Create, Key: "b", Value: "w1", Outcome: history.OK, RV: 5, Call: ms(60), Return: ms(70)},
			{ID: 5, Client: 0, Node: "n2", Kind: history.List, Outcome: history.OK, RV: 5, Call: ms(80), Return: ms(90),
				Items: map[string]history.Item{"a": {Value: "v2", RV: 4}, "b": {Value: "w1", RV: 5}}},
			{ID: 6, Client: 1, Node: "n3", Kind: history.Delete, Key: "b", ExpectRV: 5, Outcome: history.OK, Call: ms(100), Return: ms(110)},
			{ID: 7, Client: 0, Node: "n1", Kind: history.Get, Key: "a", Local: true, Outcome: history.OK, Exists: true, Read: "v2", RV: 4, Call: ms(120), Return: ms(130)},
			{ID: 8, Client: 1, Node: "n2", Kind: history.List, Local: true, Outcome: history.OK, RV: 6, Call: ms(140), Return: ms(150),
				Items: map[string]history.Item{"a": {Value: "v2", RV: 4}}},
			{ID: 10, Client: 2, Node: "n3", Kind: history.CSRApprove, Key: "c1", Outcome: history.OK, RV: 7, Call: ms(160), Return: ms(170)},
			{ID: 11, Client: 0, Node: "n3", Kind: history.Get, Key: "b", Outcome: history.Fail, Code: 404, Call: ms(180), Return: ms(190)},
		},
		Final: map[string]history.State{},
	}
	cm := []history.Event{
		{Type: history.Added, Key: "a", Value: "v1", RV: 2},
		{Type: history.Modified, Key: "a", Value: "v2", RV: 4},
		{Type: history.Added, Key: "b", Value: "w1", RV: 5},
		{Type: history.Deleted, Key: "b", Value: "w1", RV: 6},
		{Type: history.Bookmark, RV: 8},
	}
	csr := []history.Event{
		{Type: history.Added, Key: "c1", RV: 3},
		{Type: history.Modified, Key: "c1", Approved: true, RV: 7},
		{Type: history.Modified, Key: "c1", Approved: true, Value: "d1", RV: 8},
	}
	for _, n := range h.Nodes {
		sess := func(res history.Resource, s int, start uint64, evs []history.Event) {
			h.Sessions = append(h.Sessions, history.Session{Node: n, Resource: res, Session: s, StartRV: start, End: "run end"})
			for _, e := range evs {
				e.Node, e.Resource, e.Session = n, res, s
				h.Events = append(h.Events, e)
			}
		}
		if n == "n2" {
			sess(history.ConfigMaps, 0, 1, cm[:2])
			h.Sessions[len(h.Sessions)-1].End = "cut"
			sess(history.ConfigMaps, 1, 4, cm[2:])
		} else {
			sess(history.ConfigMaps, 0, 1, cm)
		}
		sess(history.CSRs, 0, 1, csr)
		h.Final[n] = history.State{RV: 8, ConfigMaps: map[string]history.Item{"a": {Value: "v2", RV: 4}}, CSRs: map[string]string{"c1": "d1"}}
	}
	return h
}

// clone deep-copies through the history's own JSON form.
func clone(t *testing.T, h *history.History) *history.History {
	t.Helper()
	var b bytes.Buffer
	if err := h.Write(&b); err != nil {
		t.Fatal(err)
	}
	c, err := history.Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// op returns the op with the given ID.
func op(t *testing.T, h *history.History, id int64) *history.Op {
	t.Helper()
	for i := range h.Ops {
		if h.Ops[i].ID == id {
			return &h.Ops[i]
		}
	}
	t.Fatalf("no op %d", id)
	return nil
}

// dropEvents removes the events matching f.
func dropEvents(h *history.History, f func(e history.Event) bool) {
	out := h.Events[:0]
	for _, e := range h.Events {
		if !f(e) {
			out = append(out, e)
		}
	}
	h.Events = out
}

// eventIndex is the index of the first event matching f.
func eventIndex(t *testing.T, h *history.History, f func(e history.Event) bool) int {
	t.Helper()
	for i, e := range h.Events {
		if f(e) {
			return i
		}
	}
	t.Fatal("no such event")
	return -1
}

func at(node string, res history.Resource, rv uint64) func(e history.Event) bool {
	return func(e history.Event) bool {
		return e.Node == node && e.Resource == res && e.RV == rv && e.Type != history.Bookmark
	}
}

// checkerCase is one table row: a mutation of the base history and what
// the checker must say about it.
type checkerCase struct {
	name   string
	mutate func(t *testing.T, h *history.History)
	// want is "" for OK, else a substring of some violation.
	want string
	// info, when set, must be a substring of some Info line.
	info string
}

func runCases(t *testing.T, checker func(*history.History) Result, cases []checkerCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := clone(t, baseHistory())
			if tc.mutate != nil {
				tc.mutate(t, h)
			}
			r := checker(h)
			assertResult(t, r, tc.want, tc.info)
		})
	}
}

func assertResult(t *testing.T, r Result, want, info string) {
	t.Helper()
	if want == "" {
		if !r.OK {
			t.Fatalf("want OK, got %s: %q %q", r, r.Violations, r.Info)
		}
	} else {
		if r.OK {
			t.Fatalf("want a violation containing %q, got OK (info %q)", want, r.Info)
		}
		if !containsSub(r.Violations, want) {
			t.Fatalf("want a violation containing %q, got %s: %q", want, r, r.Violations)
		}
	}
	if info != "" && !containsSub(r.Info, info) {
		t.Fatalf("want info containing %q, got %q", info, r.Info)
	}
}

func containsSub(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
