package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
)

const mib = 1 << 20

func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		live uint64
		want int
	}{
		{"nothing live yet", Config{Percent: 50, Floor: 256 * mib}, 0, Ceiling},
		{"tiny heap: the ceiling", Config{Percent: 50, Floor: 256 * mib}, 20 * mib, Ceiling},
		{"floor reached exactly at the ceiling", Config{Percent: 50, Floor: 300 * mib}, 100 * mib, Ceiling},
		{"small heap: the growth is the floor", Config{Percent: 50, Floor: 256 * mib}, 128 * mib, 200},
		{"floor reached exactly at 100", Config{Percent: 50, Floor: 256 * mib}, 256 * mib, 100},
		{"between: the growth is the floor", Config{Percent: 50, Floor: 256 * mib}, 400 * mib, 64},
		{"large heap: the percentage", Config{Percent: 50, Floor: 256 * mib}, 2048 * mib, 50},
		{"the floor over a large heap is the percentage", Config{Percent: 50, Floor: 256 * mib}, 512 * mib, 50},
		{"no floor", Config{Percent: 50}, 10 * mib, 50},
		{"a percentage above Go's is raised to the ceiling", Config{Percent: 200, Floor: 256 * mib}, 10 * mib, Ceiling},
		{"a percentage above Go's on a large heap", Config{Percent: 200, Floor: 256 * mib}, 4096 * mib, 200},
		{"a percentage above the ceiling is kept", Config{Percent: 500, Floor: 256 * mib}, 10 * mib, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.PercentFor(tc.live); got != tc.want {
				t.Fatalf("PercentFor(%d MiB) = %d, want %d", tc.live/mib, got, tc.want)
			}
		})
	}
}

var (
	keep [][]byte
	tiny []*byte
)

// TestTunerFollowsTheLiveHeap: with a live heap well past Floor the tuner
// applies Percent after a collection, and once the heap is freed it goes
// back to the ceiling.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// Long-lived tiny objects, as a server holds: a sentinel sharing a
	// tiny block with one of them would never be finalized.
	for range 4096 {
		tiny = append(tiny, new(byte))
	}
	tu := Start(Config{Percent: 50, Floor: 16 * mib})
	defer tu.Stop()

	for range 64 {
		keep = append(keep, make([]byte, mib))
	}
	if !collectUntil(tu, 50) {
		t.Fatalf("with 64 MiB live and a 16 MiB floor the percentage is %d, want 50", tu.Applied())
	}
	keep = nil
	// The test binary's own live heap is a few MiB: 16 MiB of growth is
	// more than the ceiling allows.
	if !collectUntil(tu, Ceiling) {
		t.Fatalf("with the heap freed the percentage is %d, want %d", tu.Applied(), Ceiling)
	}
}

// collectUntil runs collections (bounded in number) until tu has applied
// want; the adjustment runs on the finalizer goroutine after each one.
func collectUntil(tu *Tuner, want int) bool {
	for range 200 {
		runtime.GC()
		runtime.Gosched()
		if tu.Applied() == want {
			return true
		}
	}
	return false
}

func TestNegativePercentTurnsTheCollectorOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tu := Start(Config{Percent: -1, Floor: mib})
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("the collector's percentage is %d, want -1 (off)", got)
	}
	if tu.Applied() != 0 && tu.Applied() != -1 {
		t.Fatalf("Applied() = %d for an off collector", tu.Applied())
	}
}
