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
		{"nothing live yet", Config{Percent: 50, Floor: 256 * mib}, 0, 100},
		{"small heap: Go's default", Config{Percent: 50, Floor: 256 * mib}, 100 * mib, 100},
		{"floor reached exactly at 100", Config{Percent: 50, Floor: 256 * mib}, 256 * mib, 100},
		{"between: the growth is the floor", Config{Percent: 50, Floor: 256 * mib}, 400 * mib, 64},
		{"large heap: the percentage", Config{Percent: 50, Floor: 256 * mib}, 2048 * mib, 50},
		{"the floor over a large heap is the percentage", Config{Percent: 50, Floor: 256 * mib}, 512 * mib, 50},
		{"no floor", Config{Percent: 50}, 10 * mib, 50},
		{"a percentage above Go's is kept", Config{Percent: 200, Floor: 256 * mib}, 10 * mib, 200},
		{"a percentage above Go's on a large heap", Config{Percent: 200, Floor: 256 * mib}, 4096 * mib, 200},
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
// back to Go's default.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// Long-lived tiny objects, as a server holds: a sentinel sharing a
	// tiny block with one of them would never be finalized.
	for range 4096 {
		tiny = append(tiny, new(byte))
	}
	tu := Start(Config{Percent: 50, Floor: 4 * mib})
	defer tu.Stop()

	for range 64 {
		keep = append(keep, make([]byte, mib))
	}
	if !collectUntil(tu, 50) {
		t.Fatalf("with 64 MiB live and a 4 MiB floor the percentage is %d, want 50", tu.Applied())
	}
	keep = nil
	if !collectUntil(tu, 100) {
		t.Fatalf("with the heap freed the percentage is %d, want 100", tu.Applied())
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
