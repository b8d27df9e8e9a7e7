package fsm

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
)

// historyScript applies a mix of creates, updates, deletes, re-creates,
// failed preconditions and non-command entries, and returns the applied
// stream a listener saw from the start: the reference History must match.
func historyScript(t *testing.T) (*harness, []Event) {
	t.Helper()
	h := newHarness(t)
	rec := &recorder{}
	h.f.Subscribe(rec)
	cm := func(ns, name string) Key { return Key{Resource: "configmaps", Namespace: ns, Name: name} }

	h.mustPut(pod("a", "p1"), "v1")                        // 1
	h.mustPut(pod("b", "p1"), "v1")                        // 2
	h.mustPut(cm("a", "c1"), "v1")                         // 3
	h.config()                                             // 4: no event, a gap in revisions
	h.mustPut(pod("a", "p1"), "v2")                        // 5: update
	h.mustDelete(pod("b", "p1"))                           // 6
	h.mustPut(pod("b", "p1"), "v3")                        // 7: re-create after delete, Prev nil
	h.put(pod("a", "p1"), "x")                             // 8: succeeds (no precondition)
	h.apply(&Command{Op: OpDelete, Key: pod("a", "nope")}) // 9: fails, no event
	h.mustPut(pod("a", "p2"), "v1")                        // 10
	h.mustDelete(cm("a", "c1"))                            // 11
	h.mustPut(pod("a", "p2"), "v2")                        // 12
	h.mustDelete(pod("a", "p1"))                           // 13
	return h, rec.events
}

// after filters the reference stream the way History is specified to.
func after(evs []Event, p Prefix, rev uint64) []Event {
	var out []Event
	ps := p.String()
	for _, e := range evs {
		if e.Revision <= rev {
			continue
		}
		if p != (Prefix{}) {
			ks := e.KV.Key.String()
			if len(ks) < len(ps) || ks[:len(ps)] != ps {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

func TestHistory(t *testing.T) {
	cases := []struct {
		name    string
		prefix  Prefix
		after   uint64
		compact uint64 // applied as an OpCompact before reading, if non-zero
		restore bool   // read from an FSM restored from a snapshot
		wantErr error
	}{
		{name: "zero prefix from 0 is the whole applied stream"},
		{name: "a resource prefix selects that resource", prefix: pods},
		{name: "a namespace prefix selects that namespace", prefix: Prefix{Resource: "pods", Namespace: "a"}},
		{name: "only changes after afterRev are returned", after: 6},
		{name: "afterRev at a gap is exact", after: 4, prefix: pods},
		{name: "afterRev at the applied index is empty", after: 13},
		{name: "afterRev beyond the applied index is empty", after: 99},
		{name: "a restored FSM has the same history", restore: true},
		{name: "a restored FSM has the same history after a revision", restore: true, after: 5, prefix: pods},
		{name: "from the compacted revision on history is intact", compact: 6, after: 6},
		{name: "history is intact after a compaction and a restore", compact: 6, after: 7, restore: true},
		{name: "before the compacted revision is ErrCompacted", compact: 6, after: 5, wantErr: ErrCompacted},
		{name: "compaction is kept across restore", compact: 6, after: 0, restore: true, wantErr: ErrCompacted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, ref := historyScript(t)
			f := h.f
			if tc.compact != 0 {
				h.apply(&Command{Op: OpCompact, CompactRevision: tc.compact})
			}
			if tc.restore {
				f = restore(t, persist(t, h.f))
			}
			got, applied, err := f.History(tc.prefix, tc.after)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if applied != f.AppliedIndex() {
				t.Fatalf("applied = %d, want %d", applied, f.AppliedIndex())
			}
			want := after(ref, tc.prefix, tc.after)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("History(%v, %d):\n got %s\nwant %s", tc.prefix, tc.after, fmtEvents(got), fmtEvents(want))
			}
		})
	}
}

func TestHistorySharesStoredVersions(t *testing.T) {
	h, _ := historyScript(t)
	evs, _, err := h.f.History(Prefix{Resource: "pods", Namespace: "a"}, 11)
	if err != nil {
		t.Fatal(err)
	}
	// 12 is a put of a/p2: its KV is the stored version, not a copy, so the
	// watch cache holds no second copy of values the store keeps anyway.
	cur, _, _ := h.f.Get(pod("a", "p2"), 0)
	if len(evs) != 2 || evs[0].KV != cur {
		t.Fatalf("History did not return the stored KV: %s", fmtEvents(evs))
	}
}

func fmtEvents(evs []Event) string {
	s := "["
	for _, e := range evs {
		prev := "nil"
		if e.Prev != nil {
			prev = string(e.Prev.Value)
		}
		s += " " + map[EventType]string{EventPut: "put", EventDelete: "del"}[e.Type] +
			"@" + strconv.FormatUint(e.Revision, 10) + ":" + e.KV.Key.Namespace + "/" + e.KV.Key.Name + "=" + string(e.KV.Value) + "<" + prev
	}
	return s + " ]"
}
