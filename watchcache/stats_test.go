package watchcache

import (
	"runtime"
	"testing"
	"time"
)

// TestStats: Stats reports the window (events, bytes, bounds), the events
// received, the watchers registered, and the watchers cut off for being
// slow, each exactly once.
func TestStats(t *testing.T) {
	h := newHarness(t)
	c := h.cache(func(c *Config) { c.WatcherBuffer = 1 })
	if st := c.Stats(); st != (Stats{}) {
		t.Fatalf("an empty cache reports %+v", st)
	}
	watch(t, c, WatchOptions{Prefix: configmaps})
	slow := watch(t, c, WatchOptions{Prefix: pods})
	if st := c.Stats(); st.Watchers != 2 {
		t.Fatalf("two watchers registered, Stats says %d", st.Watchers)
	}
	// slow's client never reads: once its goroutine waits for it, more
	// than WatcherBuffer events later it is cut off.
	puts := 0
	deadline := time.Now().Add(safety)
	for slow.ctx.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the slow watcher was never cut off after %d writes", puts)
		}
		runtime.Gosched()
		h.put(pod("a", "p"), "v")
		puts++
	}
	ended(t, slow)
	st := c.Stats()
	tests := []struct {
		name string
		ok   bool
	}{
		{"the slow watcher is counted once", st.SlowWatchers == 1},
		{"the cut watcher is no longer registered", st.Watchers == 1},
		{"every applied event was received", st.Appended == uint64(puts)},
		{"the window holds them all", st.Events == puts && st.Bytes > 0},
		{"the window ends at the applied index", st.Progress == h.f.AppliedIndex() && st.Oldest == 0},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("%s: %+v after %d writes", tt.name, st, puts)
		}
	}
}
