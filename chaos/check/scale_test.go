package check

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

// simulate builds a correct concurrent history of n ops: each op takes
// effect at its own point k*1µs inside [Call, Return], overlapping its
// neighbours, so every checker must accept it.
func simulate(n int, seed uint64) *history.History {
	rng := rand.New(rand.NewPCG(seed, seed))
	nodes := []string{"n1", "n2", "n3"}
	h := &history.History{Nodes: nodes, StartRV: 1, MaxStaleRead: 5 * time.Second, Final: map[string]history.State{}}
	state := map[string]history.Item{}
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	rv := h.StartRV
	var events []history.Event
	emit := func(t history.EventType, key, value string) {
		events = append(events, history.Event{Type: t, Key: key, Value: value, RV: rv})
	}
	for i := 0; i < n; i++ {
		point := int64(i+1) * 1000
		o := history.Op{ID: int64(i), Client: i % 8, Node: nodes[i%3], Key: keys[rng.IntN(len(keys))],
			Call: point - rng.Int64N(2500), Return: point + rng.Int64N(2500), Outcome: history.OK}
		cur, exists := state[o.Key]
		value := fmt.Sprintf("v%d", i)
		switch p := rng.IntN(100); {
		case p < 35:
			o.Kind, o.Exists, o.Read, o.RV = history.Get, exists, cur.Value, cur.RV
			if !exists {
				o.Read, o.RV = "", 0
			}
		case p < 45:
			o.Kind, o.Local, o.Exists, o.Read, o.RV = history.Get, true, exists, cur.Value, cur.RV
			if !exists {
				o.Read, o.RV = "", 0
			}
		case p < 50:
			o.Kind, o.Key, o.RV, o.Items = history.List, "", rv, map[string]history.Item{}
			for k, it := range state {
				o.Items[k] = it
			}
		case p < 60 || !exists:
			o.Kind, o.Value = history.Create, value
			if exists {
				o.Outcome, o.Code = history.Fail, 409
				break
			}
			rv += uint64(1 + rng.IntN(2))
			state[o.Key] = history.Item{Value: value, RV: rv}
			o.RV = rv
			emit(history.Added, o.Key, value)
		case p < 92:
			o.Kind, o.Value = history.Update, value
			if rng.IntN(2) == 0 {
				o.ExpectRV = cur.RV
				if rng.IntN(10) == 0 {
					o.ExpectRV = cur.RV - 1
					o.Outcome, o.Code = history.Fail, 409
					break
				}
			}
			rv += uint64(1 + rng.IntN(2))
			state[o.Key] = history.Item{Value: value, RV: rv}
			o.RV = rv
			emit(history.Modified, o.Key, value)
		default:
			o.Kind, o.ExpectRV = history.Delete, cur.RV
			rv += uint64(1 + rng.IntN(2))
			delete(state, o.Key)
			emit(history.Deleted, o.Key, cur.Value)
		}
		if o.Kind.IsWrite() && rng.IntN(20) == 0 { // answer lost in transit
			o.Outcome, o.Code, o.RV = history.Unknown, 504, 0
		}
		h.Ops = append(h.Ops, o)
	}
	h.End = int64(n+2) * 1000
	for _, node := range nodes {
		session, start := 0, h.StartRV
		h.Sessions = append(h.Sessions, history.Session{Node: node, Resource: history.ConfigMaps, StartRV: start, End: "cut"})
		for j, e := range events {
			if j > 0 && j%5000 == 0 {
				session++
				h.Sessions = append(h.Sessions, history.Session{Node: node, Resource: history.ConfigMaps, Session: session, StartRV: start, End: "cut"})
			}
			e.Node, e.Resource, e.Session = node, history.ConfigMaps, session
			h.Events = append(h.Events, e)
			start = e.RV
		}
		h.Events = append(h.Events, history.Event{Node: node, Resource: history.ConfigMaps, Session: session, Type: history.Bookmark, RV: rv})
		final := map[string]history.Item{}
		for k, it := range state {
			final[k] = it
		}
		h.Final[node] = history.State{RV: rv, ConfigMaps: final, CSRs: map[string]string{}}
	}
	return h
}

func TestSimulatedRunPassesEveryChecker(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	h := simulate(n, 1)
	results, vis := All(h, Options{LinearizabilityTimeout: 2 * time.Minute, StaleSlack: time.Second})
	for _, r := range results {
		if r.Name == "csr" || r.Name == "tokens" {
			if r.Skipped == "" {
				t.Errorf("%s: want skipped without its ops, got %s", r.Name, r)
			}
			continue
		}
		if !r.OK {
			t.Errorf("%s: %q info %q", r, r.Violations, r.Info)
		}
	}
	if vis != nil {
		t.Errorf("visual for a passing run")
	}
}

func TestSimulatedRunWithOneStaleReadFails(t *testing.T) {
	h := simulate(2_000, 2)
	// Turn the last linearizable get of an existing key into a read of
	// that key's first value.
	first := map[string]history.Op{}
	for _, o := range h.Ops {
		if o.Kind == history.Create && o.Outcome == history.OK {
			if _, ok := first[o.Key]; !ok {
				first[o.Key] = o
			}
		}
	}
	for i := len(h.Ops) - 1; i >= 0; i-- {
		o := &h.Ops[i]
		if o.Kind == history.Get && !o.Local && o.Exists && o.Read != first[o.Key].Value {
			o.Read, o.RV = first[o.Key].Value, first[o.Key].RV
			break
		}
	}
	r, vis := Linearizability(h, time.Minute)
	if r.OK || vis == nil {
		t.Fatalf("want a violation, got %s", r)
	}
}
