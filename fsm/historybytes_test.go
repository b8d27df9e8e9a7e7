package fsm

import (
	"strings"
	"testing"
)

func TestHistoryBytesCountsSupersededValues(t *testing.T) {
	h := newHarness(t)
	v := func(n int) string { return strings.Repeat("x", n) }
	steps := []struct {
		name string
		do   func()
		want int64
	}{
		{"a create adds no history", func() { h.mustPut(pod("a", "p"), v(100)) }, 0},                  // 1
		{"an update keeps the old value as history", func() { h.mustPut(pod("a", "p"), v(10)) }, 100}, // 2
		{"a delete keeps the deleted value", func() { h.mustDelete(pod("a", "p")) }, 110},             // 3
		{"a failed precondition adds nothing", func() {
			h.apply(&Command{Op: OpPut, Key: pod("a", "q"), Value: []byte(v(5)), ModRevision: 99})
		}, 110}, // 4
		{"another key's update adds its old value", func() { h.mustPut(pod("a", "q"), v(7)); h.mustPut(pod("a", "q"), v(1)) }, 117}, // 5, 6
		{"compacting at 2 drops the value superseded at 2", func() { h.apply(&Command{Op: OpCompact, CompactRevision: 2}) }, 17},    // 7
		{"compacting at 6 drops everything superseded", func() { h.apply(&Command{Op: OpCompact, CompactRevision: 6}) }, 0},         // 8
	}
	for _, s := range steps {
		s.do()
		if got := h.f.HistoryBytes(); got != s.want {
			t.Fatalf("%s: HistoryBytes = %d, want %d", s.name, got, s.want)
		}
	}
}

func TestHistoryBytesSurvivesSnapshotAndRestore(t *testing.T) {
	h := newHarness(t)
	for i := range 5 {
		h.mustPut(pod("a", "p"), strings.Repeat("x", 10*(i+1)))
	}
	h.mustDelete(pod("a", "p"))
	want := h.f.HistoryBytes()
	if want != 10+20+30+40+50 {
		t.Fatalf("HistoryBytes = %d", want)
	}
	if got := restore(t, persist(t, h.f)).HistoryBytes(); got != want {
		t.Fatalf("restored HistoryBytes = %d, want %d", got, want)
	}
}

func TestCompactTargetForBytes(t *testing.T) {
	h := newHarness(t)
	// Revisions 1..6: p gets 6 versions of 100 bytes; 500 bytes of history,
	// superseded at 2, 3, 4, 5, 6.
	for range 6 {
		h.mustPut(pod("a", "p"), strings.Repeat("x", 100))
	}
	cases := []struct {
		max  int64
		want uint64
	}{
		{500, 0}, // within the bound already
		{499, 2}, // drop the oldest superseded value
		{300, 3}, // keep the newest three
		{0, 6},   // keep nothing superseded
	}
	for _, c := range cases {
		if got := h.f.CompactTargetForBytes(c.max); got != c.want {
			t.Errorf("CompactTargetForBytes(%d) = %d, want %d", c.max, got, c.want)
		}
	}
	// The target, applied through the log, brings the history within the bound.
	h.apply(&Command{Op: OpCompact, CompactRevision: h.f.CompactTargetForBytes(300)})
	if got := h.f.HistoryBytes(); got != 300 {
		t.Fatalf("after compaction HistoryBytes = %d, want 300", got)
	}
}
