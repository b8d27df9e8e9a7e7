package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Config is the collector policy.
type Config struct {
	// Percent is GOGC for a large live heap: how far, in percent of the
	// live heap, it grows before the next collection.
	Percent int
	// Floor is the least the heap may grow by between collections, in
	// bytes. Below Floor/Percent*100 of live heap the percentage rises
	// towards Ceiling.
	Floor uint64
	// OnChange, if set, is told each new percentage and the live heap it
	// was chosen for, so the node can log it. It runs on the finalizer
	// goroutine and must not block.
	OnChange func(percent int, live uint64)
}

// hysteresis is how many points the wanted percentage must move before
// the setting changes.
const hysteresis = 5

// Ceiling is the most Percent is raised to for a small live heap. Above
// Go's default of 100: a small store's collector CPU is a tenth of a
// TokenReview's or an apply's server CPU at 100, and 300 cut their CPU per
// operation by 15% and 11% (docs/BENCHMARKS.md). A ceiling rather than
// Floor alone bounds the heap where the live heap is tiny: the collector's
// goal scales the globals and stacks by the percentage too.
const Ceiling = 300

// ceiling is the percentage for a heap that Floor covers.
func (c Config) ceiling() int { return max(c.Percent, Ceiling) }

// PercentFor is the percentage c wants with live bytes of live heap.
func (c Config) PercentFor(live uint64) int {
	ceiling := c.ceiling()
	if live == 0 {
		return ceiling
	}
	// The percentage at which the growth is exactly Floor, rounded up.
	atFloor := (c.Floor*100 + live - 1) / live
	if atFloor >= uint64(ceiling) {
		return ceiling
	}
	return max(c.Percent, int(atFloor))
}

// Tuner applies a Config after each collection until Stop.
type Tuner struct {
	cfg     Config
	stopped atomic.Bool
	applied atomic.Int64
	sample  []metrics.Sample
}

// Start applies c's percentage for the current heap at once and again
// after every collection. A negative Percent turns the collector off
// instead (as GOGC=off does) and starts nothing.
func Start(c Config) *Tuner {
	t := &Tuner{cfg: c, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	if c.Percent < 0 {
		debug.SetGCPercent(-1)
		t.applied.Store(-1)
		t.stopped.Store(true)
		return t
	}
	t.applied.Store(none)
	t.adjust()
	t.arm()
	return t
}

// Stop ends the adjustments; the setting in force stays.
func (t *Tuner) Stop() { t.stopped.Store(true) }

// Applied is the percentage in force (-1 for off).
func (t *Tuner) Applied() int { return int(t.applied.Load()) }

// arm attaches the next adjustment to the next collection: the finalizer
// of an object nothing references runs after the collection that found it
// unreachable.
func (t *Tuner) arm() {
	s := new(sentinel)
	runtime.SetFinalizer(s, func(*sentinel) {
		if t.stopped.Load() {
			return
		}
		t.adjust()
		t.arm()
	})
}

// sentinel is big enough (and holds a pointer) to stay out of the tiny
// allocator: a tiny object shares its 16-byte block with others, and its
// finalizer waits until all of them are unreachable, which in a server
// holding long-lived small objects can be never. The chain of adjustments
// would then stop after the first.
type sentinel struct {
	_ *int
	_ [16]byte
}

// adjust sets the percentage for the live heap the last collection found.
// Only the finalizer goroutine calls it after Start.
func (t *Tuner) adjust() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	want := t.cfg.PercentFor(live)
	cur := t.applied.Load()
	if cur == int64(want) {
		return
	}
	// Small moves wait, except onto the two ends of the range.
	ends := want == t.cfg.Percent || want == t.cfg.ceiling()
	if cur != none && abs(want-int(cur)) <= hysteresis && !ends {
		return
	}
	debug.SetGCPercent(want)
	t.applied.Store(int64(want))
	if t.cfg.OnChange != nil {
		t.cfg.OnChange(want, live)
	}
}

// none is Tuner.applied before the first adjustment.
const none = -1 << 31

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
