package watchcache

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trustplane/trustplane/fsm"
	"k8s.io/utils/clock"
)

// fanout is 1,000 watchers on one prefix of a real fsm, each drained by its
// own goroutine that records, per event, the time from just before the
// write was applied to its receipt.
type fanout struct {
	h       *harness
	c       *Cache
	sent    []atomic.Int64 // by revision: UnixNano before ApplyBatch
	mu      sync.Mutex
	lat     []time.Duration // every delivery
	last    []time.Duration // per event: the slowest watcher
	lastMax []atomic.Int64  // by revision
	got     sync.WaitGroup
	done    sync.WaitGroup
}

func newFanout(b *testing.B, watchers, events int, selector bool) *fanout {
	h := newHarness(b)
	cfg := DefaultConfig()
	cfg.Clock = clock.RealClock{}
	opts := WatchOptions{Prefix: pods}
	if selector {
		// What a label selector costs: every watcher evaluates a predicate
		// on the decoded object (decoded once, shared) and its previous
		// version.
		cfg.Decode = func(kv *fsm.KV) (any, error) { return string(kv.Value), nil }
		opts.Predicate = func(obj any) (bool, error) { return strings.HasPrefix(obj.(string), "val"), nil }
	}
	c, err := New(cfg, h.f)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	fo := &fanout{h: h, c: c, sent: make([]atomic.Int64, events+2), lastMax: make([]atomic.Int64, events+2)}
	for range watchers {
		w, err := c.Watch(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		fo.done.Add(1)
		go func() {
			defer fo.done.Done()
			lat := make([]time.Duration, 0, events)
			for ev := range w.Events() {
				d := time.Duration(time.Now().UnixNano() - fo.sent[ev.Revision].Load())
				lat = append(lat, d)
				for m := &fo.lastMax[ev.Revision]; ; {
					cur := m.Load()
					if int64(d) <= cur || m.CompareAndSwap(cur, int64(d)) {
						break
					}
				}
				fo.got.Done()
			}
			fo.mu.Lock()
			fo.lat = append(fo.lat, lat...)
			fo.mu.Unlock()
		}()
	}
	return fo
}

func (fo *fanout) write(i int) {
	rev := fo.h.next
	fo.sent[rev].Store(time.Now().UnixNano())
	fo.h.put(pod("a", fmt.Sprint("p", i%100)), "value")
}

func (fo *fanout) report(b *testing.B, events int) {
	fo.c.Close()
	fo.done.Wait()
	for rev := 1; rev <= events; rev++ {
		fo.last = append(fo.last, time.Duration(fo.lastMax[rev].Load()))
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}
	b.ReportMetric(ms(pct(fo.lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(pct(fo.lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(pct(fo.last, 0.99)), "p99-last-watcher-ms")
	b.ReportMetric(ms(pct(fo.lat, 1)), "max-ms")
}

// BenchmarkFanout1000 measures delivery latency to 1,000 watchers of one
// prefix. "isolated" applies each write once the previous one reached
// every watcher (the limit of a low write rate; ns/op is the time to reach
// all 1,000); "isolated-selector" is the same with a predicate on decoded
// objects for every watcher; "20wps" applies writes at 20 per second, the target scenario
// (use -benchtime=200x for a stable p99: 10 s). p99-ms is over every
// (watcher, event) delivery; p99-last-watcher-ms over each event's slowest
// watcher.
func BenchmarkFanout1000(b *testing.B) {
	const watchers = 1000
	for _, mode := range []string{"isolated", "isolated-selector"} {
		b.Run(mode, func(b *testing.B) {
			fo := newFanout(b, watchers, b.N, mode == "isolated-selector")
			b.ResetTimer()
			for i := range b.N {
				fo.got.Add(watchers)
				fo.write(i)
				fo.got.Wait()
			}
			b.StopTimer()
			fo.report(b, b.N)
		})
	}
	b.Run("20wps", func(b *testing.B) {
		fo := newFanout(b, watchers, b.N, false)
		fo.got.Add(watchers * b.N)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		b.ResetTimer()
		for i := range b.N {
			fo.write(i)
			if i < b.N-1 {
				<-tick.C
			}
		}
		fo.got.Wait()
		b.StopTimer()
		fo.report(b, b.N)
	})
}

// BenchmarkWindowMemory measures the heap the window holds per event, for
// 100,000 events with 512-byte values. bytes/event counts everything the
// window keeps alive (its items, the KVs and their values), as when the
// fsm has compacted them away; overhead-bytes/event counts only what the
// window adds to KVs the fsm holds anyway (its normal state).
func BenchmarkWindowMemory(b *testing.B) {
	const n = 100_000
	var total, overhead float64
	for range b.N {
		cfg := DefaultConfig()
		c, err := New(cfg, fsm.New())
		if err != nil {
			b.Fatal(err)
		}
		base := heapInUse()
		evs := make([]fsm.Event, n)
		prev := map[string]*fsm.KV{}
		for i := range evs {
			name := fmt.Sprint("pod-", i%1000)
			kv := &fsm.KV{
				Key:            fsm.Key{Resource: "pods", Namespace: "default", Name: name},
				Value:          make([]byte, 512),
				UID:            "00000000-0000-0000-0000-000000000000",
				CreateRevision: 1,
				ModRevision:    uint64(i + 1),
			}
			evs[i] = fsm.Event{Type: fsm.EventPut, Revision: uint64(i + 1), KV: kv, Prev: prev[name]}
			prev[name] = kv
		}
		prev = nil
		withKVs := heapInUse()
		for i := 0; i < n; i += 100 {
			c.OnApply(evs[i : i+100])
			c.OnIndex(uint64(i + 100))
		}
		held := heapInUse()
		overhead += float64(held-withKVs) / n
		clear(evs)
		evs = nil
		total += float64(heapInUse()-base) / n
		if c.Len() != n {
			b.Fatalf("window holds %d events, want %d", c.Len(), n)
		}
		c.Close()
	}
	b.ReportMetric(total/float64(b.N), "bytes/event")
	b.ReportMetric(overhead/float64(b.N), "overhead-bytes/event")
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
