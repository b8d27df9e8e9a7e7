package watchcache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trustplane/trustplane/fsm"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults are valid", func(*Config) {}, true},
		{"window must be positive", func(c *Config) { c.Window = 0 }, false},
		{"max events must be positive", func(c *Config) { c.MaxEvents = 0 }, false},
		{"max bytes must be positive", func(c *Config) { c.MaxBytes = 0 }, false},
		{"bookmark interval must be positive", func(c *Config) { c.BookmarkInterval = -time.Second }, false},
		{"watcher buffer must be positive", func(c *Config) { c.WatcherBuffer = 0 }, false},
		{"clock must be set", func(c *Config) { c.Clock = nil }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(cfg)
			if err := cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if _, err := New(cfg, fsm.New()); (err == nil) != tc.ok {
				t.Fatalf("New() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestResourceVersionSemantics is the watch RV table. The log is
//
//	1 put a/a=a1  2 put a/b=b1  3 put a/a=a2  4 (config entry)  5 del a/b
//	6 put a/c=c1  | watch starts |  7 put a/c=c2  8 put a/a=a3  9 del a/a
//	10 put a/z=end
//
// and every case must end with the event at 10, so an extra or missing
// event anywhere shows.
func TestResourceVersionSemantics(t *testing.T) {
	later := []string{"MODIFIED 7 a/c=c2", "MODIFIED 8 a/a=a3", "DELETED 9 a/a=a3", "ADDED 10 a/z=end"}
	cases := []struct {
		name string
		opts WatchOptions
		want []string
	}{
		{"RV 0 with Initial is the current state, then every later change",
			WatchOptions{Initial: true},
			append([]string{"ADDED 3 a/a=a2", "ADDED 6 a/c=c1"}, later...)},
		{"InitialEventsEnd ends the initial events with a marked bookmark at the state's revision",
			WatchOptions{Initial: true, InitialEventsEnd: true},
			append([]string{"ADDED 3 a/a=a2", "ADDED 6 a/c=c1", "BOOKMARK 6 end"}, later...)},
		{"RV N with Initial is the state at N, then the changes after N",
			WatchOptions{StartRevision: 2, Initial: true},
			append([]string{"ADDED 1 a/a=a1", "ADDED 2 a/b=b1", "MODIFIED 3 a/a=a2", "DELETED 5 a/b=b1", "ADDED 6 a/c=c1"}, later...)},
		{"RV N is exactly the changes after N",
			WatchOptions{StartRevision: 3},
			append([]string{"DELETED 5 a/b=b1", "ADDED 6 a/c=c1"}, later...)},
		{"RV N at a gap in the log is exact",
			WatchOptions{StartRevision: 4},
			append([]string{"DELETED 5 a/b=b1", "ADDED 6 a/c=c1"}, later...)},
		{"RV at the applied index is only later changes",
			WatchOptions{StartRevision: 6}, later},
		{"RV 0 without Initial is only changes from now",
			WatchOptions{}, later},
		{"RV in the future waits for it, then starts after it",
			WatchOptions{StartRevision: 8}, later[2:]},
		{"RV in the future with Initial is the state at N once N is applied",
			WatchOptions{StartRevision: 8, Initial: true, InitialEventsEnd: true},
			append([]string{"ADDED 8 a/a=a3", "ADDED 7 a/c=c2", "BOOKMARK 8 end"}, later[2:]...)},
		{"a namespace prefix selects one namespace",
			WatchOptions{Prefix: fsm.Prefix{Resource: "pods", Namespace: "a"}, StartRevision: 6}, later},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.put(pod("a", "a"), "a1")
			h.put(pod("a", "b"), "b1")
			h.put(pod("a", "a"), "a2")
			h.gap()
			h.del(pod("a", "b"))
			h.put(pod("a", "c"), "c1")
			c := h.cache(nil)
			if tc.opts.Prefix == (fsm.Prefix{}) {
				tc.opts.Prefix = pods
			}
			w := watch(t, c, tc.opts)
			h.put(pod("a", "c"), "c2")
			h.put(pod("a", "a"), "a3")
			h.del(pod("a", "a"))
			h.put(pod("a", "z"), "end")
			if got := recvN(t, w, len(tc.want)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("events:\n%s\nwant:\n%s", lines(got...), lines(tc.want...))
			}
		})
	}
}

func TestTooOld(t *testing.T) {
	cases := []struct {
		name string
		// setup writes and returns the cache to watch.
		setup func(h *harness) *Cache
		// A watch from tooOld gets a *TooOldError naming oldest; a watch
		// from fine starts with the change at first.
		tooOld, oldest uint64
		initial        bool
		fine, first    uint64
	}{
		{
			name: "a revision MaxEvents pushed out of the window is too old",
			setup: func(h *harness) *Cache {
				c := h.cache(func(c *Config) { c.MaxEvents = 3 })
				for i := range 6 {
					h.put(pod("a", "p"), fmt.Sprint(i))
				}
				return c
			},
			tooOld: 2, oldest: 3, fine: 3, first: 4,
		},
		{
			name: "a revision older than Window is too old, and the window moves without writes",
			setup: func(h *harness) *Cache {
				c := h.cache(func(c *Config) { c.Window = time.Minute })
				h.put(pod("a", "p"), "1")
				h.put(pod("a", "p"), "2")
				h.put(pod("a", "p"), "3")
				h.clk.Step(30 * time.Second)
				h.put(pod("a", "p"), "4")
				h.put(pod("a", "p"), "5")
				h.clk.Step(45 * time.Second) // 1-3 are 75s old, 4-5 are 45s old
				return c
			},
			tooOld: 2, oldest: 3, fine: 3, first: 4,
		},
		{
			name: "after a compaction and a restart, revisions before the compacted one are too old",
			setup: func(h *harness) *Cache {
				for i := range 6 {
					h.put(pod("a", "p"), fmt.Sprint(i))
				}
				h.compact(4)
				h.put(pod("a", "p"), "8")
				restarted := fsm.New()
				restoreInto(t, restarted, persist(t, h.f))
				h.f = restarted
				return h.cache(nil)
			},
			tooOld: 3, oldest: 4, fine: 4, first: 5,
		},
		{
			name: "a restarted node keeps at most MaxEvents of the fsm's history",
			setup: func(h *harness) *Cache {
				for i := range 6 {
					h.put(pod("a", "p"), fmt.Sprint(i))
				}
				restarted := fsm.New()
				restoreInto(t, restarted, persist(t, h.f))
				h.f = restarted
				return h.cache(func(c *Config) { c.MaxEvents = 3 })
			},
			tooOld: 2, oldest: 3, fine: 3, first: 4,
		},
		{
			name: "with Initial, a revision the fsm compacted is too old even inside the window",
			setup: func(h *harness) *Cache {
				c := h.cache(nil)
				for i := range 6 {
					h.put(pod("a", "p"), fmt.Sprint(i))
				}
				h.compact(4)
				h.put(pod("a", "p"), "8")
				return c
			},
			tooOld: 2, oldest: 4, initial: true, fine: 4, first: 4,
		},
		{
			name: "without Initial, the window still serves a revision the fsm compacted",
			setup: func(h *harness) *Cache {
				c := h.cache(nil)
				for i := range 6 {
					h.put(pod("a", "p"), fmt.Sprint(i))
				}
				h.compact(4)
				h.put(pod("a", "p"), "8")
				if _, err := c.Watch(context.Background(), WatchOptions{Prefix: pods, StartRevision: 1}); err != nil {
					t.Fatalf("watch from 1: %v", err)
				}
				return c
			},
			tooOld: 0, fine: 2, first: 3,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := tc.setup(h)
			if tc.tooOld != 0 {
				_, err := c.Watch(context.Background(), WatchOptions{Prefix: pods, StartRevision: tc.tooOld, Initial: tc.initial})
				var e *TooOldError
				if !errors.Is(err, ErrTooOld) || !errors.As(err, &e) {
					t.Fatalf("Watch(%d) = %v, want ErrTooOld", tc.tooOld, err)
				}
				want := fmt.Sprintf("too old resource version: %d (%d)", tc.tooOld, tc.oldest)
				if e.Requested != tc.tooOld || e.Oldest != tc.oldest || e.Error() != want {
					t.Fatalf("error = %+v %q, want %q", *e, e.Error(), want)
				}
			}
			w := watch(t, c, WatchOptions{Prefix: pods, StartRevision: tc.fine, Initial: tc.initial})
			if ev := recv(t, w); ev.Revision != tc.first {
				t.Fatalf("watch from %d starts with %s, want revision %d", tc.fine, format(t, ev), tc.first)
			}
		})
	}
}

// TestSuccessiveWatchersSeeOneSequence starts 100 watchers at successive
// revisions while a writer creates, updates and deletes; each must see
// exactly the suffix of the one applied sequence after its start.
func TestSuccessiveWatchersSeeOneSequence(t *testing.T) {
	const (
		watchers = 100
		writes   = 400
	)
	h := newHarness(t)
	c := h.cache(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		live := map[fsm.Key]bool{}
		for i := range writes {
			k := pod(fmt.Sprint("ns", i%2), fmt.Sprintf("p%d", i%7))
			switch {
			case i%5 == 4:
				h.gap()
			case live[k] && i%3 == 0:
				h.del(k)
				live[k] = false
			default:
				h.put(k, fmt.Sprint("v", i))
				live[k] = true
			}
		}
		h.put(pod("a", "last"), "end")
	}()

	type started struct {
		from uint64
		w    *Watcher
	}
	ws := make([]started, 0, watchers)
	for i := range watchers {
		// Successive revisions: some already applied, some in the future.
		from := uint64(1 + i*3) // 0 would mean "from now"
		w := watch(t, c, WatchOptions{Prefix: pods, StartRevision: from})
		ws = append(ws, started{from, w})
	}
	<-done
	last := h.f.AppliedIndex()

	ref, _, err := h.f.History(pods, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	for _, s := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var want []fsm.Event
			for _, e := range ref {
				if e.Revision > s.from {
					want = append(want, e)
				}
			}
			for i, e := range want {
				var ev Event
				select {
				case ev = <-s.w.Events():
				case <-time.After(safety):
					errs <- fmt.Errorf("watcher from %d: no event %d of %d", s.from, i, len(want))
					return
				}
				wantType := Modified
				switch {
				case e.Type == fsm.EventDelete:
					wantType = Deleted
				case e.Prev == nil:
					wantType = Added
				}
				if ev.Revision != e.Revision || ev.Type != wantType || ev.KV.Key != e.KV.Key || string(ev.KV.Value) != string(e.KV.Value) {
					errs <- fmt.Errorf("watcher from %d: event %d is %s %d %v, want %s %d %v",
						s.from, i, ev.Type, ev.Revision, ev.KV.Key, wantType, e.Revision, e.KV.Key)
					return
				}
			}
			if len(want) == 0 || want[len(want)-1].Revision != last {
				errs <- fmt.Errorf("watcher from %d: sequence does not end at %d", s.from, last)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPredicateTransitions(t *testing.T) {
	h := newHarness(t)
	c := h.cache(nil)
	matches := func(obj any) (bool, error) { return strings.HasPrefix(obj.(string), "match"), nil }
	w := watch(t, c, WatchOptions{Prefix: fsm.Prefix{Resource: "pods", Namespace: "a"}, Predicate: matches})
	all := watch(t, c, WatchOptions{Prefix: pods})

	steps := []struct {
		name string
		do   func() uint64
		want string // "" = the filtered watcher sees nothing
	}{
		{"a matching create is ADDED", func() uint64 { return h.put(pod("a", "x"), "match-1") }, "ADDED %d a/x=match-1"},
		{"an update that stays matching is MODIFIED", func() uint64 { return h.put(pod("a", "x"), "match-2") }, "MODIFIED %d a/x=match-2"},
		{"an update that leaves the selector is DELETED with the previous content", func() uint64 { return h.put(pod("a", "x"), "no-1") }, "DELETED %d a/x=match-2"},
		{"an update outside the selector is skipped", func() uint64 { return h.put(pod("a", "x"), "no-2") }, ""},
		{"an update that enters the selector is ADDED", func() uint64 { return h.put(pod("a", "x"), "match-3") }, "ADDED %d a/x=match-3"},
		{"deleting a matching object is DELETED", func() uint64 { return h.del(pod("a", "x")) }, "DELETED %d a/x=match-3"},
		{"a create that does not match is skipped", func() uint64 { return h.put(pod("a", "y"), "no") }, ""},
		{"deleting an object that does not match is skipped", func() uint64 { return h.del(pod("a", "y")) }, ""},
		{"another namespace is skipped", func() uint64 { return h.put(pod("b", "x"), "match") }, ""},
		{"another resource is skipped", func() uint64 { return h.put(cm("a", "x"), "match") }, ""},
	}
	var want []string
	for _, s := range steps {
		rev := s.do()
		if s.want != "" {
			want = append(want, fmt.Sprintf(s.want, rev))
		}
	}
	end := h.put(pod("a", "end"), "match-end")
	want = append(want, fmt.Sprintf("ADDED %d a/end=match-end", end))
	if got := recvN(t, w, len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("filtered watcher:\n%s\nwant:\n%s", lines(got...), lines(want...))
	}
	// The unfiltered watcher sees every pod change, including the ones the
	// predicate skipped (9 pod writes, then the end marker).
	got := recvN(t, all, 10)
	if got[2] != fmt.Sprintf("MODIFIED %d a/x=no-1", 3) || got[9] != fmt.Sprintf("ADDED %d a/end=match-end", end) {
		t.Fatalf("unfiltered watcher:\n%s", lines(got...))
	}
	// A leaving DELETED shows the previous version but carries the
	// change's revision; Prev is the version before the change.
	h2 := newHarness(t)
	c2 := h2.cache(nil)
	w2 := watch(t, c2, WatchOptions{Prefix: pods, Predicate: matches})
	h2.put(pod("a", "x"), "match")
	recv(t, w2)
	rev := h2.put(pod("a", "x"), "no")
	ev := recv(t, w2)
	prev, _ := ev.PrevObject()
	if ev.Type != Deleted || ev.Revision != rev || ev.KV.ModRevision != 1 || prev != "match" {
		t.Fatalf("leaving event = %+v (prev %v)", ev, prev)
	}
}

func TestPredicateOnInitialEvents(t *testing.T) {
	h := newHarness(t)
	h.put(pod("a", "x"), "match")
	h.put(pod("a", "y"), "no")
	c := h.cache(nil)
	w := watch(t, c, WatchOptions{Prefix: pods, Initial: true, InitialEventsEnd: true,
		Predicate: func(obj any) (bool, error) { return obj == "match", nil }})
	want := []string{"ADDED 1 a/x=match", "BOOKMARK 2 end"}
	if got := recvN(t, w, 2); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestPredicateErrorEndsWatcher(t *testing.T) {
	h := newHarness(t)
	c := h.cache(nil)
	boom := errors.New("boom")
	w := watch(t, c, WatchOptions{Prefix: pods, Predicate: func(any) (bool, error) { return false, boom }})
	h.put(pod("a", "x"), "v")
	ended(t, w)
	if !errors.Is(w.Err(), boom) {
		t.Fatalf("Err = %v, want %v", w.Err(), boom)
	}
}

func TestSlowWatcherIsCutOff(t *testing.T) {
	h := newHarness(t)
	c := h.cache(func(c *Config) { c.WatcherBuffer = 8 })
	slow := watch(t, c, WatchOptions{Prefix: pods})
	fast := watch(t, c, WatchOptions{Prefix: pods})
	// The fast client keeps up (it reads each event before the next
	// write); the slow one never reads. Apply never waits for either.
	var fastGot []string
	write := func() {
		rev := h.put(pod("a", "p"), fmt.Sprint(len(fastGot)))
		fastGot = append(fastGot, format(t, recv(t, fast)))
		if want := fmt.Sprintf("a/p=%d", rev-1); !strings.HasSuffix(fastGot[len(fastGot)-1], want) {
			t.Fatalf("fast watcher got %q, want %s", fastGot[len(fastGot)-1], want)
		}
	}
	// Fill slow's channel until its goroutine waits for the client...
	deadline := time.Now().Add(safety)
	for !slow.blocked.Load() {
		// With GOMAXPROCS=1 the writer and fast hand the processor to
		// each other directly; yield so that slow's goroutine runs too.
		runtime.Gosched()
		if time.Now().After(deadline) {
			t.Fatalf("slow watcher never blocked: ctx %v, %d buffered, pos %d, %d writes", context.Cause(slow.ctx), len(slow.out), slow.pos.Load(), len(fastGot))
		}
		write()
	}
	// ...then up to WatcherBuffer events applied since are tolerated, and
	// one more is not.
	for c.appended.Load()-slow.blockedAt.Load() < 8 {
		write()
	}
	if slow.ctx.Err() != nil {
		t.Fatal("slow watcher cut off before WatcherBuffer events were applied")
	}
	write()
	if !errors.Is(context.Cause(slow.ctx), ErrSlowWatcher) {
		t.Fatal("slow watcher not cut off by the apply that exceeded WatcherBuffer")
	}
	n := len(fastGot)
	// What slow holds is a prefix of the stream, in order.
	held := ended(t, slow)
	if !errors.Is(slow.Err(), ErrSlowWatcher) {
		t.Fatalf("slow watcher Err = %v, want ErrSlowWatcher", slow.Err())
	}
	if len(held) == 0 || len(held) >= n || !reflect.DeepEqual(held, fastGot[:len(held)]) {
		t.Fatalf("slow watcher held %d events: %v", len(held), held)
	}
	// The client resumes from its last revision and gets the rest.
	resumed := watch(t, c, WatchOptions{Prefix: pods, StartRevision: uint64(len(held))})
	if rest := recvN(t, resumed, n-len(held)); !reflect.DeepEqual(rest, fastGot[len(held):]) {
		t.Fatalf("resumed watcher differs")
	}
}

func TestBookmarks(t *testing.T) {
	h := newHarness(t)
	c := h.cache(nil)
	idle := watch(t, c, WatchOptions{Prefix: configmaps, Bookmarks: true})
	h.put(pod("a", "p"), "1")
	h.put(pod("a", "p"), "2")
	h.gap()
	waitTimer(t, h.clk)
	h.clk.Step(time.Minute)
	// Idle progress: no configmap changed, yet the bookmark is at the
	// node's applied index.
	if got := format(t, recv(t, idle)); got != "BOOKMARK 3" {
		t.Fatalf("idle watcher got %q, want BOOKMARK 3", got)
	}
	h.put(cm("a", "c"), "1")
	h.put(pod("a", "p"), "3")
	waitTimer(t, h.clk)
	h.clk.Step(time.Minute)
	want := []string{"ADDED 4 a/c=1", "BOOKMARK 5"}
	if got := recvN(t, idle, 2); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// A watcher without Bookmarks never gets one.
	plain := watch(t, c, WatchOptions{Prefix: configmaps})
	waitTimer(t, h.clk)
	h.clk.Step(time.Minute)
	recv(t, idle)
	end := h.put(cm("a", "c"), "2")
	if got := format(t, recv(t, plain)); got != fmt.Sprintf("MODIFIED %d a/c=2", end) {
		t.Fatalf("plain watcher got %q", got)
	}
}

func TestBookmarkWaitsForFutureRevision(t *testing.T) {
	h := newHarness(t)
	c := h.cache(nil)
	h.put(pod("a", "p"), "1")
	w := watch(t, c, WatchOptions{Prefix: configmaps, StartRevision: 3, Bookmarks: true})
	waitTimer(t, h.clk)
	h.clk.Step(time.Minute) // applied index 1 < 3: nothing to report yet
	waitTimer(t, h.clk)     // the tick was handled and the timer re-armed
	if n := len(w.Events()); n != 0 {
		t.Fatalf("%d events before the start revision was reached", n)
	}
	h.put(pod("a", "p"), "2")
	h.put(pod("a", "p"), "3")
	h.put(pod("a", "p"), "4")
	h.clk.Step(time.Minute)
	if got := format(t, recv(t, w)); got != "BOOKMARK 4" {
		t.Fatalf("got %q, want BOOKMARK 4", got)
	}
}

func TestWindowTrimming(t *testing.T) {
	cases := []struct {
		name       string
		mod        func(*Config)
		write      func(h *harness)
		wantLen    int
		wantOldest uint64
	}{
		{
			name:  "MaxEvents keeps the newest events",
			mod:   func(c *Config) { c.MaxEvents = 10 },
			write: func(h *harness) { writeN(h, 25) },
			// 15 events dropped, so a watch can start after 15.
			wantLen: 10, wantOldest: 15,
		},
		{
			name: "events older than Window are dropped by age",
			mod:  func(c *Config) { c.Window = time.Minute },
			write: func(h *harness) {
				writeN(h, 5)
				h.clk.Step(40 * time.Second)
				writeN(h, 3)
				h.clk.Step(40 * time.Second)
				h.gap() // any applied index trims
			},
			wantLen: 3, wantOldest: 5,
		},
		{
			name: "an event exactly Window old is kept",
			mod:  func(c *Config) { c.Window = time.Minute },
			write: func(h *harness) {
				writeN(h, 2)
				h.clk.Step(time.Minute)
				h.gap()
			},
			wantLen: 2, wantOldest: 0,
		},
		{
			name: "MaxBytes keeps the newest events that fit",
			mod:  func(c *Config) { c.MaxBytes = 3 * (1000 + eventOverhead) },
			write: func(h *harness) {
				for i := range 5 {
					h.put(pod("a", fmt.Sprint("big", i)), strings.Repeat("x", 1000))
				}
			},
			wantLen: 3, wantOldest: 2,
		},
		{
			name: "MaxBytes counts the previous version an update keeps alive",
			mod:  func(c *Config) { c.MaxBytes = 3000 },
			write: func(h *harness) {
				h.put(pod("a", "p"), strings.Repeat("x", 1000)) // 1000 + overhead
				h.put(pod("a", "p"), strings.Repeat("y", 1000)) // 2000 + overhead
			},
			wantLen: 1, wantOldest: 1,
		},
		{
			name:    "gaps in revisions do not count as events",
			mod:     func(c *Config) { c.MaxEvents = 2 },
			write:   func(h *harness) { h.gap(); writeN(h, 1); h.gap(); writeN(h, 2); h.gap() },
			wantLen: 2, wantOldest: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := h.cache(tc.mod)
			tc.write(h)
			oldest, progress := c.Range()
			if c.Len() != tc.wantLen || oldest != tc.wantOldest || progress != h.f.AppliedIndex() {
				t.Fatalf("Len %d Range (%d, %d), want %d (%d, %d)", c.Len(), oldest, progress,
					tc.wantLen, tc.wantOldest, h.f.AppliedIndex())
			}
		})
	}
}

// formatFSM renders an fsm event as an unfiltered watcher sees it.
func formatFSM(e fsm.Event) string {
	typ := Modified
	switch {
	case e.Type == fsm.EventDelete:
		typ = Deleted
	case e.Prev == nil:
		typ = Added
	}
	return fmt.Sprintf("%s %d %s/%s=%s", typ, e.Revision, e.KV.Key.Namespace, e.KV.Key.Name, e.KV.Value)
}

func writeN(h *harness, n int) {
	for i := range n {
		h.put(pod("a", fmt.Sprint("p", i)), fmt.Sprint(i))
	}
}

// TestRestartKeepsHistory restarts a node the way raft does (restore the
// latest snapshot into a fresh fsm, then replay the rest of the log) and
// resumes a watch from a revision taken before the restart.
func TestRestartKeepsHistory(t *testing.T) {
	for _, cacheFirst := range []bool{true, false} {
		name := "cache started before the snapshot is restored (raft's order)"
		if !cacheFirst {
			name = "cache started on the restored fsm"
		}
		t.Run(name, func(t *testing.T) { testRestart(t, cacheFirst) })
	}
}

func testRestart(t *testing.T, cacheFirst bool) {
	h := newHarness(t)
	for i := range 10 {
		h.put(pod("a", fmt.Sprint("p", i%3)), fmt.Sprint(i))
		if i%4 == 3 {
			h.del(pod("a", fmt.Sprint("p", i%3)))
		}
	}
	h.compact(5)
	h.put(pod("a", "p0"), "after-compact")
	snap := persist(t, h.f)
	snapIndex := h.f.AppliedIndex()
	h.put(pod("a", "p1"), "after-snapshot") // in the log, not the snapshot

	// The restarted node: raft restores the snapshot into a fresh fsm
	// and replays the log entry after it.
	r := newHarness(t)
	var c *Cache
	if cacheFirst {
		c = r.cache(nil)
	}
	restoreInto(t, r.f, snap)
	if !cacheFirst {
		c = r.cache(nil)
	}
	r.next = snapIndex + 1
	r.put(pod("a", "p1"), "after-snapshot")

	restartedAt := r.f.AppliedIndex()
	for from := uint64(5); from <= restartedAt; from++ {
		w := watch(t, c, WatchOptions{Prefix: pods, StartRevision: from})
		end := r.put(pod("b", "marker"), fmt.Sprint(from))
		ref, _, err := r.f.History(pods, 5)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range ref {
			if e.Revision > from {
				want = append(want, formatFSM(e))
			}
		}
		if want[len(want)-1] != fmt.Sprintf("%s %d b/marker=%d", map[bool]EventType{true: Added, false: Modified}[from == 5], end, from) {
			t.Fatalf("history does not end with the marker: %v", want)
		}
		if got := recvN(t, w, len(want)); !reflect.DeepEqual(got, want) {
			t.Fatalf("watch from %d after restart:\n%s\nwant:\n%s", from, lines(got...), lines(want...))
		}
		w.Stop()
	}
	if _, err := c.Watch(context.Background(), WatchOptions{Prefix: pods, StartRevision: 4}); !errors.Is(err, ErrTooOld) {
		t.Fatalf("watch from before the compacted revision: %v, want ErrTooOld", err)
	}
}

// TestRestoreWhileWatching is a follower receiving a snapshot: watchers
// inside the restored history get the changes they missed, in order;
// watchers before it are cut off.
func TestRestoreWhileWatching(t *testing.T) {
	leader := newHarness(t)
	for i := range 6 {
		leader.put(pod("a", "p"), fmt.Sprint(i))
	}
	leader.compact(3)
	leader.put(pod("a", "p"), "8")
	snapA := persist(t, leader.f) // compacted at 3
	leader.compact(5)
	snapB := persist(t, leader.f) // compacted at 5

	// follow applies the first 3 entries, starts a cache and a watcher
	// that has read them, then restores snap.
	follow := func(snap []byte) *Watcher {
		f := newHarness(t)
		for i := range 3 {
			f.put(pod("a", "p"), fmt.Sprint(i))
		}
		c := f.cache(nil)
		w := watch(t, c, WatchOptions{Prefix: pods, StartRevision: 1})
		if got := recvN(t, w, 2); got[1] != "MODIFIED 3 a/p=2" {
			t.Fatalf("before restore: %v", got)
		}
		restoreInto(t, f.f, snap)
		return w
	}

	behind := follow(snapA)
	want := []string{"MODIFIED 4 a/p=3", "MODIFIED 5 a/p=4", "MODIFIED 6 a/p=5", "MODIFIED 8 a/p=8"}
	if got := recvN(t, behind, len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after restore:\n%s\nwant:\n%s", lines(got...), lines(want...))
	}

	gone := follow(snapB)
	ended(t, gone)
	if !errors.Is(gone.Err(), ErrSlowWatcher) {
		t.Fatalf("watcher before the restored history: Err = %v, want ErrSlowWatcher", gone.Err())
	}
}

func TestWatcherEnds(t *testing.T) {
	h := newHarness(t)
	c := h.cache(nil)

	w := watch(t, c, WatchOptions{Prefix: pods})
	w.Stop()
	ended(t, w)
	if w.Err() != nil {
		t.Fatalf("stopped watcher Err = %v, want nil", w.Err())
	}

	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, WatchOptions{Prefix: pods})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	ended(t, w)
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("cancelled watcher Err = %v", w.Err())
	}

	if _, err := c.Watch(context.Background(), WatchOptions{Prefix: pods, InitialEventsEnd: true}); err == nil {
		t.Fatal("InitialEventsEnd without Initial was accepted")
	}

	waiting := watch(t, c, WatchOptions{Prefix: pods, StartRevision: 100, Initial: true})
	busy := watch(t, c, WatchOptions{Prefix: pods})
	h.put(pod("a", "p"), "1")
	c.Close()
	for _, w := range []*Watcher{waiting, busy} {
		ended(t, w)
		if !errors.Is(w.Err(), ErrClosed) {
			t.Fatalf("Err after Close = %v, want ErrClosed", w.Err())
		}
	}
	if _, err := c.Watch(context.Background(), WatchOptions{Prefix: pods}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
	h.put(pod("a", "p"), "2") // a closed cache is no longer fed
	if c.Len() != 0 {
		t.Fatalf("closed cache holds %d events", c.Len())
	}
}

// TestDecodeNotHeld: the window holds no decoded objects. Events nobody
// looks at are never decoded, and every Object call asks Config.Decode (the
// storage layer's shared cache in production) instead of a copy of its own.
func TestDecodeNotHeld(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	calls := map[uint64]int{}
	c := h.cache(func(c *Config) {
		c.Decode = func(kv *fsm.KV) (any, error) {
			mu.Lock()
			calls[kv.ModRevision]++
			mu.Unlock()
			return string(kv.Value), nil
		}
	})
	count := func() map[uint64]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(calls)
	}
	var ws []*Watcher
	for range 20 {
		ws = append(ws, watch(t, c, WatchOptions{Prefix: pods}))
	}
	h.put(pod("a", "p"), "1")
	h.put(pod("a", "p"), "2")
	var evs []Event
	for _, w := range ws {
		evs = append(evs, recv(t, w), recv(t, w))
	}
	if n := count(); len(n) != 0 {
		t.Fatalf("events delivered without a predicate were decoded: %v", n)
	}
	for _, ev := range evs[:2] {
		obj, err := ev.Object()
		if err != nil || obj != string(ev.KV.Value) {
			t.Fatalf("Object() = %v, %v; want %q", obj, err, ev.KV.Value)
		}
	}
	if prev, err := evs[1].PrevObject(); err != nil || prev != "1" {
		t.Fatalf("PrevObject() = %v, %v; want \"1\"", prev, err)
	}
	if n := count(); n[1] != 2 || n[2] != 1 {
		t.Fatalf("decode calls per revision = %v, want one per Object call", n)
	}
	// A watcher with a predicate decodes the new and the previous version
	// of each change it filters, through Decode each time.
	pass := func(any) (bool, error) { return true, nil }
	w := watch(t, c, WatchOptions{Prefix: pods, Predicate: pass})
	h.put(pod("a", "p"), "3")
	recv(t, w)
	if n := count(); n[2] != 2 || n[3] != 1 {
		t.Fatalf("decode calls per revision = %v, want the predicate's two", n)
	}
}

// TestNewWhileApplying starts the cache while writes are being applied: it
// subscribes, then loads history and drops the overlap, so a watch from the
// first revision sees every change exactly once.
func TestNewWhileApplying(t *testing.T) {
	for range 20 {
		h := newHarness(t)
		for i := range 50 {
			h.put(pod("a", fmt.Sprint("p", i%5)), fmt.Sprint(i))
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 50; i < 300; i++ {
				h.put(pod("a", fmt.Sprint("p", i%5)), fmt.Sprint(i))
			}
		}()
		c := h.cache(nil)
		<-done
		ref, _, err := h.f.History(pods, 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range ref {
			want = append(want, formatFSM(e))
		}
		w := watch(t, c, WatchOptions{Prefix: pods, StartRevision: 1})
		if got := recvN(t, w, len(want)-1); !reflect.DeepEqual(got, want[1:]) {
			t.Fatalf("watch from 1:\n%s\nwant:\n%s", lines(got...), lines(want[1:]...))
		}
		if n := c.Len(); n != 300 {
			t.Fatalf("window holds %d events, want 300", n)
		}
	}
}

func TestBookmarkDelay(t *testing.T) {
	h := newHarness(t)
	c := h.cache(nil) // BookmarkInterval: 1m; the fake clock is at t0
	cases := []struct {
		name     string
		deadline time.Duration // from t0; 0 = none
		want     time.Duration
	}{
		{"without a deadline, every interval", 0, time.Minute},
		{"a deadline after the next interval changes nothing", 5 * time.Minute, time.Minute},
		{"two seconds before a deadline inside the interval", 30 * time.Second, 28 * time.Second},
		{"a deadline closer than two seconds gets the interval", time.Second, time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.bookmarkDelay(t0.Add(tc.deadline), tc.deadline != 0); got != tc.want {
				t.Fatalf("bookmarkDelay = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWindowSlides keeps a capped window through many trims (the array is
// compacted in place now and then) and checks it is still exact.
func TestWindowSlides(t *testing.T) {
	h := newHarness(t)
	c := h.cache(func(c *Config) { c.MaxEvents = 1000 })
	all := watch(t, c, WatchOptions{Prefix: pods})
	const n = 5000
	for i := range n {
		h.put(pod("a", "p"), fmt.Sprint(i))
		if i%100 == 99 {
			recvN(t, all, 100) // keep up, so it is never cut off
		}
	}
	if oldest, _ := c.Range(); c.Len() != 1000 || oldest != n-1000 {
		t.Fatalf("Len %d oldest %d, want 1000 and %d", c.Len(), oldest, n-1000)
	}
	w := watch(t, c, WatchOptions{Prefix: pods, StartRevision: n - 1000})
	for rev := uint64(n - 999); rev <= n; rev++ {
		if ev := recv(t, w); ev.Revision != rev {
			t.Fatalf("got revision %d, want %d", ev.Revision, rev)
		}
	}
}

func TestMaxBytesBoundsTheHistoryLoadedAtStart(t *testing.T) {
	h := newHarness(t)
	for i := range 4 {
		h.put(pod("a", fmt.Sprint("big", i)), strings.Repeat("x", 1000))
	}
	c := h.cache(func(c *Config) { c.MaxBytes = 2 * (1000 + eventOverhead) })
	if oldest, _ := c.Range(); c.Len() != 2 || oldest != 2 {
		t.Fatalf("Len %d oldest %d, want 2 events after revision 2", c.Len(), oldest)
	}
	_, err := c.Watch(context.Background(), WatchOptions{Prefix: fsm.Prefix{Resource: "pods"}, StartRevision: 1})
	if !errors.Is(err, ErrTooOld) {
		t.Fatalf("watch from 1: %v, want ErrTooOld", err)
	}
}
