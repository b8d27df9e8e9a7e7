package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

func TestPreconditionFailuresChangeNothing(t *testing.T) {
	live := pod("ns", "live")
	gone := pod("ns", "gone")
	missing := pod("ns", "missing")

	cases := []struct {
		name     string
		cmd      Command
		want     error
		wantPrev Key // zero: Prev must be nil
	}{
		{"put must-not-exist on a live key is ErrExists",
			Command{Op: OpPut, Key: live, Value: []byte("x"), MustNotExist: true}, ErrExists, live},
		{"put with mod revision on a missing key is ErrNotFound",
			Command{Op: OpPut, Key: missing, Value: []byte("x"), ModRevision: 1}, ErrNotFound, Key{}},
		{"put with uid on a deleted key is ErrNotFound",
			Command{Op: OpPut, Key: gone, Value: []byte("x"), MatchUID: "uid-gone"}, ErrNotFound, Key{}},
		{"put with a stale mod revision is ErrModRevisionMismatch",
			Command{Op: OpPut, Key: live, Value: []byte("x"), ModRevision: 1}, ErrModRevisionMismatch, live},
		{"put with a wrong uid is ErrUIDMismatch",
			Command{Op: OpPut, Key: live, Value: []byte("x"), MatchUID: "other"}, ErrUIDMismatch, live},
		{"mod revision is checked before uid",
			Command{Op: OpPut, Key: live, Value: []byte("x"), ModRevision: 1, MatchUID: "other"}, ErrModRevisionMismatch, live},
		{"delete of a missing key is ErrNotFound",
			Command{Op: OpDelete, Key: missing}, ErrNotFound, Key{}},
		{"delete of a deleted key is ErrNotFound",
			Command{Op: OpDelete, Key: gone}, ErrNotFound, Key{}},
		{"delete with a stale mod revision is ErrModRevisionMismatch",
			Command{Op: OpDelete, Key: live, ModRevision: 2}, ErrModRevisionMismatch, live},
		{"delete with a wrong uid is ErrUIDMismatch",
			Command{Op: OpDelete, Key: live, MatchUID: "other"}, ErrUIDMismatch, live},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustPut(live, "v1")
			h.mustPut(gone, "v1")
			h.mustDelete(gone)
			h.mustPut(live, "v2") // live is now at revision 4, created at 1
			before := persist(t, h.f)
			rec := &recorder{}
			h.f.Subscribe(rec)

			r := h.apply(&tc.cmd)
			if !errors.Is(r.Err, tc.want) || r.Err != tc.want {
				t.Fatalf("Err = %v, want %v", r.Err, tc.want)
			}
			if r.KV != nil {
				t.Fatalf("KV = %+v, want nil", r.KV)
			}
			if tc.wantPrev == (Key{}) {
				if r.Prev != nil {
					t.Fatalf("Prev = %+v, want nil", r.Prev)
				}
			} else {
				cur, _, _ := h.f.Get(tc.wantPrev, 0)
				if r.Prev != cur || cur == nil {
					t.Fatalf("Prev = %+v, want current %+v", r.Prev, cur)
				}
			}
			if got := h.f.AppliedIndex(); got != 5 {
				t.Fatalf("AppliedIndex = %d, want 5", got)
			}
			if len(rec.events) != 0 || !reflect.DeepEqual(rec.indexes, []uint64{5}) {
				t.Fatalf("listener saw events %v indexes %v", rec.events, rec.indexes)
			}
			// Nothing but the applied index changed: a snapshot of the
			// failed FSM equals one where a no-op took index 5.
			ref := newHarness(t)
			ref.mustPut(live, "v1")
			ref.mustPut(gone, "v1")
			ref.mustDelete(gone)
			ref.mustPut(live, "v2")
			if string(persist(t, ref.f)) != string(before) {
				t.Fatal("reference FSM differs before the failed command")
			}
			ref.apply(&Command{Op: OpNoop})
			if string(persist(t, ref.f)) != string(persist(t, h.f)) {
				t.Fatal("failed command changed state")
			}
		})
	}
}

func TestRevisions(t *testing.T) {
	h := newHarness(t)
	k := pod("ns", "a")

	r := h.put(k, "v1") // 1
	if r.Err != nil || r.Prev != nil {
		t.Fatalf("create: %+v", r)
	}
	want := &KV{Key: k, Value: []byte("v1"), UID: "uid-a", CreateRevision: 1, ModRevision: 1}
	if !reflect.DeepEqual(r.KV, want) {
		t.Fatalf("created %+v, want %+v", r.KV, want)
	}
	h.config() // 2: a gap in revisions

	r2 := h.apply(&Command{Op: OpPut, Key: k, Value: []byte("v2"), UID: "uid-a", ModRevision: 1, MatchUID: "uid-a"}) // 3
	if r2.Err != nil || r2.Prev != r.KV {
		t.Fatalf("update: %+v", r2)
	}
	if r2.KV.CreateRevision != 1 || r2.KV.ModRevision != 3 {
		t.Fatalf("update revisions create=%d mod=%d, want 1 and 3", r2.KV.CreateRevision, r2.KV.ModRevision)
	}

	r3 := h.apply(&Command{Op: OpDelete, Key: k, ModRevision: 3}) // 4
	if r3.Err != nil || r3.KV != nil || r3.Prev != r2.KV {
		t.Fatalf("delete: %+v", r3)
	}

	r4 := h.apply(&Command{Op: OpPut, Key: k, Value: []byte("v3"), UID: "uid-b", MustNotExist: true}) // 5
	if r4.Err != nil || r4.Prev != nil || r4.KV.CreateRevision != 5 || r4.KV.ModRevision != 5 {
		t.Fatalf("re-create: %+v", r4)
	}

	for _, tc := range []struct {
		rev  uint64
		want string // "" = no live object
		at   uint64
	}{
		{0, "v3", 5}, {1, "v1", 1}, {2, "v1", 2}, {3, "v2", 3}, {4, "", 4}, {5, "v3", 5},
	} {
		kv, at, err := h.f.Get(k, tc.rev)
		if err != nil {
			t.Fatalf("Get at %d: %v", tc.rev, err)
		}
		if at != tc.at {
			t.Errorf("Get at %d served at %d, want %d", tc.rev, at, tc.at)
		}
		got := ""
		if kv != nil {
			got = string(kv.Value)
		}
		if got != tc.want {
			t.Errorf("Get at %d = %q, want %q", tc.rev, got, tc.want)
		}
	}
	if kv, at, err := h.f.Get(pod("ns", "missing"), 0); kv != nil || at != 5 || err != nil {
		t.Fatalf("Get missing = %v, %d, %v; want nil, 5, nil", kv, at, err)
	}
	if _, _, err := h.f.Get(k, 6); !errors.Is(err, ErrFutureRevision) {
		t.Fatalf("Get future: %v", err)
	}
}

func TestListOrderingAndPaging(t *testing.T) {
	h := newHarness(t)
	// Applied out of order; "ns" must sort before "ns-a" whatever the names.
	h.mustPut(pod("ns-a", "a"), "1")                                              // 1
	h.mustPut(pod("ns", "z"), "2")                                                // 2
	h.mustPut(pod("ns", "b"), "3")                                                // 3
	h.mustPut(pod("", "cluster"), "4")                                            // 4 (cluster-scoped key of the same resource)
	h.mustPut(pod("ns", "dead"), "5")                                             // 5
	h.mustDelete(pod("ns", "dead"))                                               // 6
	h.mustPut(Key{Resource: "secrets", Namespace: "ns", Name: "s"}, "x")          // 7
	h.mustPut(Key{Group: "g", Resource: "pods", Namespace: "ns", Name: "x"}, "x") // 8

	names := func(kvs []*KV) string {
		var s []string
		for _, kv := range kvs {
			s = append(s, kv.Key.Namespace+"/"+kv.Key.Name)
		}
		return strings.Join(s, ",")
	}
	cases := []struct {
		name      string
		p         Prefix
		opts      ListOptions
		want      string
		rev       uint64
		more      bool
		remaining int64
	}{
		{"all namespaces in key order", pods, ListOptions{}, "/cluster,ns/b,ns/z,ns-a/a", 8, false, 0},
		{"one namespace excludes ns-a", Prefix{Resource: "pods", Namespace: "ns"}, ListOptions{}, "ns/b,ns/z", 8, false, 0},
		{"other namespace", Prefix{Resource: "pods", Namespace: "ns-a"}, ListOptions{}, "ns-a/a", 8, false, 0},
		{"limit cuts and counts the rest", pods, ListOptions{Limit: 2}, "/cluster,ns/b", 8, true, 2},
		{"limit equal to the size is not more", pods, ListOptions{Limit: 4}, "/cluster,ns/b,ns/z,ns-a/a", 8, false, 0},
		{"start after a key", pods, ListOptions{StartAfter: pod("ns", "b").String(), Limit: 1}, "ns/z", 8, true, 1},
		{"start after the last page", pods, ListOptions{StartAfter: pod("ns", "z").String(), Limit: 1}, "ns-a/a", 8, false, 0},
		{"start after a deleted key", pods, ListOptions{StartAfter: pod("ns", "dead").String()}, "ns/z,ns-a/a", 8, false, 0},
		{"start after beyond the prefix", pods, ListOptions{StartAfter: pod("zz", "z").String()}, "", 8, false, 0},
		{"start after before the prefix", Prefix{Resource: "pods", Namespace: "ns"}, ListOptions{StartAfter: pod("a", "a").String()}, "ns/b,ns/z", 8, false, 0},
		{"at a historical revision", pods, ListOptions{Revision: 5}, "/cluster,ns/b,ns/dead,ns/z,ns-a/a", 5, false, 0},
		{"at revision 2", pods, ListOptions{Revision: 2}, "ns/z,ns-a/a", 2, false, 0},
		{"historical with limit", pods, ListOptions{Revision: 5, Limit: 3}, "/cluster,ns/b,ns/dead", 5, true, 2},
		{"empty resource", Prefix{Resource: "nodes"}, ListOptions{}, "", 8, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h.f.List(tc.p, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(res.KVs); got != tc.want {
				t.Errorf("keys %q, want %q", got, tc.want)
			}
			if res.Revision != tc.rev || res.More != tc.more || (tc.more && res.Remaining != tc.remaining) {
				t.Errorf("rev=%d more=%v remaining=%d, want %d %v %d", res.Revision, res.More, res.Remaining, tc.rev, tc.more, tc.remaining)
			}
		})
	}
	if n := h.f.Count(pods); n != 4 {
		t.Errorf("Count(pods) = %d, want 4", n)
	}
	if n := h.f.Count(Prefix{Resource: "pods", Namespace: "ns"}); n != 2 {
		t.Errorf("Count(pods in ns) = %d, want 2", n)
	}
}

func TestCompaction(t *testing.T) {
	h := newHarness(t)
	a, b, c := pod("ns", "a"), pod("ns", "b"), pod("ns", "c")
	h.mustPut(a, "a1")                                   // 1
	h.mustPut(b, "b1")                                   // 2
	h.mustPut(a, "a2")                                   // 3
	h.mustDelete(b)                                      // 4
	h.mustPut(c, "c1")                                   // 5
	h.mustDelete(c)                                      // 6
	h.mustPut(c, "c2")                                   // 7
	h.mustPut(a, "a3")                                   // 8
	h.apply(&Command{Op: OpCompact, CompactRevision: 6}) // 9

	if got := h.f.CompactedRevision(); got != 6 {
		t.Fatalf("CompactedRevision = %d, want 6", got)
	}
	for _, rev := range []uint64{1, 5} {
		if _, _, err := h.f.Get(a, rev); !errors.Is(err, ErrCompacted) {
			t.Errorf("Get at %d: %v, want ErrCompacted", rev, err)
		}
		if _, err := h.f.List(pods, ListOptions{Revision: rev}); !errors.Is(err, ErrCompacted) {
			t.Errorf("List at %d: %v, want ErrCompacted", rev, err)
		}
	}
	if _, err := h.f.List(pods, ListOptions{Revision: 10}); !errors.Is(err, ErrFutureRevision) {
		t.Errorf("List at 10: %v, want ErrFutureRevision", err)
	}
	// Reads at and after the compacted revision still see exact history.
	for _, tc := range []struct {
		rev  uint64
		want string
	}{{6, "ns/a=a2"}, {7, "ns/a=a2,ns/c=c2"}, {8, "ns/a=a3,ns/c=c2"}, {0, "ns/a=a3,ns/c=c2"}} {
		res, err := h.f.List(pods, ListOptions{Revision: tc.rev})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range res.KVs {
			got = append(got, fmt.Sprintf("%s/%s=%s", kv.Key.Namespace, kv.Key.Name, kv.Value))
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("List at %d = %v, want %s", tc.rev, got, tc.want)
		}
	}
	// What was dropped: a keeps a2 (the newest <= 6) and a3; b is gone
	// entirely; c keeps only c2.
	h.f.mu.RLock()
	hist := map[string][]uint64{}
	h.f.st.tree.Ascend(func(e entry) bool {
		for _, v := range e.versions {
			hist[keyOf(e).Name] = append(hist[keyOf(e).Name], v.rev)
		}
		return true
	})
	h.f.mu.RUnlock()
	if want := map[string][]uint64{"a": {3, 8}, "c": {7}}; !reflect.DeepEqual(hist, want) {
		t.Errorf("retained history %v, want %v", hist, want)
	}
	// An older compaction never moves the compacted revision back, and a
	// compaction beyond the applied index is clamped to it.
	h.apply(&Command{Op: OpCompact, CompactRevision: 2}) // 10
	if got := h.f.CompactedRevision(); got != 6 {
		t.Fatalf("CompactedRevision after older compaction = %d, want 6", got)
	}
	h.apply(&Command{Op: OpCompact, CompactRevision: 1000}) // 11
	if got := h.f.CompactedRevision(); got != 11 {
		t.Fatalf("CompactedRevision after future compaction = %d, want 11", got)
	}
	if kv, _, err := h.f.Get(a, 11); err != nil || string(kv.Value) != "a3" {
		t.Fatalf("Get at compacted revision = %v, %v", kv, err)
	}
}

func TestListener(t *testing.T) {
	h := newHarness(t)
	rec := &recorder{}
	cancel := h.f.Subscribe(rec)
	second := &recorder{}
	h.f.Subscribe(second)
	k := pod("ns", "a")

	c1 := h.mustPut(k, "v1")                                 // 1
	h.mustPut(k, "v2")                                       // 2
	h.apply(&Command{Op: OpPut, Key: k, MustNotExist: true}) // 3: fails
	h.config()                                               // 4
	h.apply(&Command{Op: OpNoop})                            // 5
	h.mustDelete(k)                                          // 6
	h.apply(&Command{Op: OpDelete, Key: k})                  // 7: fails

	if !reflect.DeepEqual(rec.indexes, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("OnIndex calls %v", rec.indexes)
	}
	if len(rec.events) != 3 {
		t.Fatalf("got %d events, want 3: %+v", len(rec.events), rec.events)
	}
	e := rec.events
	if e[0].Type != EventPut || e[0].Revision != 1 || e[0].Prev != nil || e[0].KV != c1 {
		t.Errorf("create event %+v", e[0])
	}
	if e[1].Type != EventPut || e[1].Revision != 2 || e[1].Prev != c1 || e[1].KV.CreateRevision != 1 || e[1].KV.ModRevision != 2 {
		t.Errorf("update event %+v", e[1])
	}
	if e[2].Type != EventDelete || e[2].Revision != 6 || e[2].Prev != e[1].KV ||
		e[2].KV.ModRevision != 6 || e[2].KV.CreateRevision != 1 || string(e[2].KV.Value) != "v2" {
		t.Errorf("delete event %+v", e[2])
	}
	if e[2].Prev.ModRevision != 2 {
		t.Errorf("delete event modified the deleted version: %+v", e[2].Prev)
	}
	if !reflect.DeepEqual(second.indexes, rec.indexes) || len(second.events) != 3 {
		t.Errorf("second listener saw %v / %d events", second.indexes, len(second.events))
	}

	// A batch is one OnApply and one OnIndex, in log order.
	batch := []*raft.Log{
		cmdLog(8, &Command{Op: OpPut, Key: pod("ns", "x"), Value: []byte("1")}),
		{Index: 9, Type: raft.LogConfiguration},
		cmdLog(10, &Command{Op: OpPut, Key: pod("ns", "y"), Value: []byte("1")}),
		cmdLog(11, &Command{Op: OpDelete, Key: pod("ns", "nope")}),
	}
	before := rec.batches
	out := h.f.ApplyBatch(batch)
	if len(out) != 4 || out[1] != nil || out[3].(*Result).Err != ErrNotFound {
		t.Fatalf("ApplyBatch results %v", out)
	}
	if rec.batches != before+1 || rec.indexes[len(rec.indexes)-1] != 11 || len(rec.indexes) != 8 {
		t.Fatalf("batch notified %d times, indexes %v", rec.batches-before, rec.indexes)
	}
	if got := rec.events[len(rec.events)-2:]; got[0].Revision != 8 || got[1].Revision != 10 {
		t.Fatalf("batch events out of order: %+v", got)
	}

	cancel()
	cancel() // idempotent
	h.next = 12
	h.mustPut(k, "after cancel")
	if rec.indexes[len(rec.indexes)-1] != 11 {
		t.Fatal("cancelled listener still called")
	}
	if second.indexes[len(second.indexes)-1] != 12 {
		t.Fatal("remaining listener not called")
	}
}

// selfCancel cancels itself and subscribes another listener from inside a
// callback; neither may deadlock.
type selfCancel struct {
	f      *FSM
	cancel func()
	added  *recorder
	calls  int
}

func (s *selfCancel) OnApply([]Event) {}
func (s *selfCancel) OnIndex(uint64) {
	s.calls++
	s.cancel()
	s.added = &recorder{}
	s.f.Subscribe(s.added)
	_ = s.f.AppliedIndex() // reads are allowed from a listener
}

func TestListenerMayCancelAndSubscribeDuringApply(t *testing.T) {
	h := newHarness(t)
	s := &selfCancel{f: h.f}
	s.cancel = h.f.Subscribe(s)
	h.mustPut(pod("ns", "a"), "1")
	h.mustPut(pod("ns", "b"), "1")
	if s.calls != 1 {
		t.Fatalf("self-cancelling listener called %d times", s.calls)
	}
	if !reflect.DeepEqual(s.added.indexes, []uint64{2}) {
		t.Fatalf("listener added during apply saw %v", s.added.indexes)
	}
}

// stateChecker asserts that the state is visible to readers when it is told.
type stateChecker struct {
	t *testing.T
	f *FSM
}

func (c stateChecker) OnApply(evs []Event) {
	for _, e := range evs {
		kv, _, err := c.f.Get(e.KV.Key, 0)
		if err != nil || (e.Type == EventPut && kv != e.KV) || (e.Type == EventDelete && kv != nil) {
			c.t.Errorf("event at %d not visible to readers: %v %v", e.Revision, kv, err)
		}
	}
}
func (c stateChecker) OnIndex(i uint64) {
	if got := c.f.AppliedIndex(); got != i {
		c.t.Errorf("OnIndex(%d) but AppliedIndex() = %d", i, got)
	}
}

func TestListenerSeesVisibleState(t *testing.T) {
	h := newHarness(t)
	h.f.Subscribe(stateChecker{t, h.f})
	h.mustPut(pod("ns", "a"), "1")
	h.mustDelete(pod("ns", "a"))
	h.config()
}

func TestUndecodableCommandPanics(t *testing.T) {
	cases := []struct {
		name string
		data []byte
	}{
		{"garbage", []byte{0xde, 0xad}},
		{"empty", nil},
		{"unknown version", append([]byte{9}, (&Command{Op: OpNoop}).Encode()[1:]...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.mustPut(pod("ns", "a"), "1")
			msg := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				h.f.ApplyBatch([]*raft.Log{
					cmdLog(2, &Command{Op: OpPut, Key: pod("ns", "b"), Value: []byte("1")}),
					{Index: 3, Type: raft.LogCommand, Data: tc.data},
				})
				return ""
			}()
			if !strings.Contains(msg, "index 3") || !strings.Contains(msg, "decode") {
				t.Fatalf("panic message %q does not name the index", msg)
			}
			// The batch was rejected before anything changed.
			if got := h.f.AppliedIndex(); got != 1 {
				t.Fatalf("AppliedIndex after panic = %d, want 1", got)
			}
			if kv, _, _ := h.f.Get(pod("ns", "b"), 0); kv != nil {
				t.Fatal("first entry of the panicking batch was applied")
			}
		})
	}
}

func TestNonIncreasingIndexPanics(t *testing.T) {
	h := newHarness(t)
	h.mustPut(pod("ns", "a"), "1")
	defer func() {
		if recover() == nil {
			t.Fatal("re-applying index 1 did not panic")
		}
	}()
	h.f.Apply(cmdLog(1, &Command{Op: OpNoop}))
}

// TestConcurrentReadsAndApply runs readers, waiters, subscribers and
// snapshot persisting against the apply path; it is meant for -race.
func TestConcurrentReadsAndApply(t *testing.T) {
	f := New()
	logs := scriptLog()
	last := logs[len(logs)-1].Index
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				at := f.AppliedIndex()
				res, err := f.List(Prefix{Resource: "configmaps"}, ListOptions{Revision: at, Limit: 5})
				if err != nil && !errors.Is(err, ErrCompacted) {
					t.Error(err)
					return
				}
				for _, kv := range res.KVs {
					if kv.ModRevision > res.Revision || (at != 0 && res.Revision != at) {
						t.Errorf("List at %d served at %d returned a version from %d", at, res.Revision, kv.ModRevision)
					}
					_ = len(kv.Value)
				}
				_, _, _ = f.Get(Key{Resource: "configmaps", Namespace: "ns-0", Name: "cm-00"}, 0)
				cancel := f.Subscribe(discard{})
				cancel()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := f.WaitApplied(t.Context(), last); err != nil {
			t.Error(err)
		}
	}()
	for i, l := range logs {
		f.Apply(l)
		if i%20 == 0 {
			snap, _ := f.Snapshot()
			wg.Add(1)
			go func() {
				defer wg.Done()
				var sink memSink
				if err := snap.Persist(&sink); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	close(done)
	wg.Wait()
}
