package storage

import (
	"fmt"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/fsm"
)

// TestObjectCacheBound: deleted keys leave the cache at the next sweep, so
// it stays within about twice the live keys.
func TestObjectCacheBound(t *testing.T) {
	var enc atomic.Int64
	b := &objBudget{max: 1 << 40, enc: &enc}
	c := &objCache{}
	b.register(c)
	live := map[fsm.Key]uint64{}
	liveFn := func(k fsm.Key) (uint64, bool) { r, ok := live[k]; return r, ok }
	obj := func() runtime.Object { return &api.ServiceAccount{} }
	for i := 0; i < 10*minSweepAt; i++ {
		kv := &fsm.KV{Key: fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: fmt.Sprint(i)}, ModRevision: uint64(i + 1)}
		live[kv.Key] = kv.ModRevision
		if i >= 10 {
			// Only ten keys are live at a time.
			delete(live, fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: fmt.Sprint(i - 10)})
		}
		c.put(kv, obj(), liveFn)
		if len(c.m) > minSweepAt {
			t.Fatalf("after %d puts with 10 live keys the cache holds %d", i+1, len(c.m))
		}
	}
	// Swept entries release their cached encodings.
	ten := []byte("0123456789")
	for _, e := range c.m {
		e.json.Store(&ten)
		enc.Add(int64(len(ten)))
	}
	live = map[fsm.Key]uint64{}
	for i := 0; len(c.m) > 0 && i < 10*minSweepAt; i++ {
		c.put(&fsm.KV{Key: fsm.Key{Resource: "serviceaccounts", Name: fmt.Sprint("gone-", i)}}, obj(), liveFn)
	}
	if n := enc.Load(); n != 0 {
		t.Fatalf("after every entry was swept %d bytes of encodings are still counted", n)
	}
	if n, want := b.bytes.Load(), cachedCost(c); n != want {
		t.Fatalf("the budget counts %d bytes, the cache holds %d", n, want)
	}
	// Replaced versions of one key are swept too.
	live = map[fsm.Key]uint64{}
	one := fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: "one"}
	for i := 0; i < 10*minSweepAt; i++ {
		kv := &fsm.KV{Key: one, ModRevision: uint64(i + 1)}
		live[one] = kv.ModRevision
		c.put(kv, obj(), liveFn)
		if len(c.m) > minSweepAt {
			t.Fatalf("after %d updates of one key the cache holds %d", i+1, len(c.m))
		}
	}
	// A version is served only for its own KV.
	k := fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: "x"}
	kv, same := &fsm.KV{Key: k, ModRevision: 100}, &api.ServiceAccount{}
	c.put(kv, same, liveFn)
	if got := c.get(kv); got != same {
		t.Fatalf("the cached version was not served")
	}
	if got := c.get(&fsm.KV{Key: k, ModRevision: 101}); got != nil {
		t.Fatalf("a version the cache does not hold was served")
	}
}

// cachedCost is the cost of the entries cs hold.
func cachedCost(cs ...*objCache) int64 {
	var n int64
	for _, c := range cs {
		c.mu.RLock()
		for _, e := range c.m {
			n += e.cost
		}
		c.mu.RUnlock()
	}
	return n
}

// TestObjectCacheBudget: the decoded objects of every cache of a node stay
// within its budget, counted exactly; eviction takes from every cache, and
// entries read since the last eviction outlast those that were not.
func TestObjectCacheBudget(t *testing.T) {
	live := func(fsm.Key) (uint64, bool) { return 1, true }
	value := make([]byte, 1000)
	cost := objectCost(&fsm.KV{Value: value})
	for _, tc := range []struct {
		name string
		// max is the budget in entries.
		max int
		// puts per cache, in turn.
		caches, puts int
		// hot: the first hot keys of cache 0 are read after every put.
		hot int
	}{
		{name: "one cache within budget", max: 100, caches: 1, puts: 50},
		{name: "one cache past budget", max: 100, caches: 1, puts: 1000},
		{name: "three caches past budget", max: 100, caches: 3, puts: 1000},
		{name: "read entries stay", max: 100, caches: 1, puts: 1000, hot: 20},
		{name: "budget of one entry", max: 1, caches: 2, puts: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var enc atomic.Int64
			b := &objBudget{max: int64(tc.max) * cost, enc: &enc}
			caches := make([]*objCache, tc.caches)
			for i := range caches {
				caches[i] = &objCache{}
				b.register(caches[i])
			}
			var hot []*fsm.KV
			for i := 0; i < tc.puts; i++ {
				for ci, c := range caches {
					kv := &fsm.KV{Key: fsm.Key{Resource: fmt.Sprint("r", ci), Name: fmt.Sprint(i)}, ModRevision: 1, Value: value}
					obj := &api.ServiceAccount{}
					if got := c.put(kv, obj, live); got != obj {
						t.Fatalf("put of a new version returned another object")
					}
					if ci == 0 && i < tc.hot {
						hot = append(hot, kv)
					}
					for _, h := range hot {
						caches[0].entry(h)
					}
					if n := b.bytes.Load(); n > b.max {
						t.Fatalf("after %d puts the caches hold %d bytes, budget %d", i+1, n, b.max)
					}
				}
			}
			if n, want := b.bytes.Load(), cachedCost(caches...); n != want {
				t.Fatalf("the budget counts %d bytes, the caches hold %d", n, want)
			}
			if tc.puts*tc.caches <= tc.max {
				for _, c := range caches {
					if len(c.m) != tc.puts {
						t.Fatalf("within budget a cache holds %d of %d entries", len(c.m), tc.puts)
					}
				}
			}
			if tc.caches > 1 && tc.max >= 10 {
				for i, c := range caches {
					if len(c.m) == 0 {
						t.Fatalf("cache %d was emptied by the others' puts", i)
					}
				}
			}
			// Keys read after every put outlast the others.
			for _, h := range hot {
				if caches[0].get(h) == nil {
					t.Fatalf("%s, read after every put, was evicted", h.Key.Name)
				}
			}
		})
	}
}

// TestObjectCacheReleasedEncoding: an encoding cached for an entry that
// has been evicted meanwhile is not counted for good.
func TestObjectCacheReleasedEncoding(t *testing.T) {
	var enc atomic.Int64
	b := &objBudget{max: 1 << 40, enc: &enc}
	c := &objCache{}
	b.register(c)
	kv := &fsm.KV{Key: fsm.Key{Resource: "serviceaccounts", Name: "a"}, ModRevision: 1}
	c.put(kv, &api.ServiceAccount{}, func(fsm.Key) (uint64, bool) { return 1, true })
	e := c.entry(kv)
	c.shrink(1)
	if c.get(kv) != nil {
		t.Fatalf("shrink(1) left an entry")
	}
	s := &Storage{maxItemEncodings: 1 << 20}
	payload := []byte("0123456789")
	if got := s.keepEncoding(e, &e.json, payload); string(got) != string(payload) {
		t.Fatalf("keepEncoding returned %q", got)
	}
	if n := s.itemEncodings.Load(); n != 0 {
		t.Fatalf("%d bytes of an evicted entry's encoding are still counted", n)
	}
}

// TestObjectCacheIdleSweep: a sweep drops the entries nobody read since
// the previous one, whatever the budget, and releases their cost; an entry
// read between two sweeps survives the second, and leaves at the third
// unless read again.
func TestObjectCacheIdleSweep(t *testing.T) {
	live := func(fsm.Key) (uint64, bool) { return 1, true }
	value := make([]byte, 100)
	var enc atomic.Int64
	b := &objBudget{max: 1 << 30, enc: &enc}
	caches := []*objCache{{}, {}}
	for _, c := range caches {
		b.register(c)
	}
	var kvs [2][]*fsm.KV
	for ci, c := range caches {
		for i := 0; i < 10; i++ {
			kv := &fsm.KV{Key: fsm.Key{Resource: fmt.Sprint("r", ci), Name: fmt.Sprint(i)}, ModRevision: 1, Value: value}
			c.put(kv, &api.ServiceAccount{}, live)
			kvs[ci] = append(kvs[ci], kv)
		}
	}
	// Read the first three of cache 0 and the first of cache 1.
	read := func() {
		for _, kv := range kvs[0][:3] {
			caches[0].entry(kv)
		}
		caches[1].entry(kvs[1][0])
	}
	read()
	b.sweepIdle()
	if len(caches[0].m) != 3 || len(caches[1].m) != 1 {
		t.Fatalf("after a sweep the caches hold %d and %d entries, want the 3 and 1 read", len(caches[0].m), len(caches[1].m))
	}
	if n, want := b.bytes.Load(), cachedCost(caches...); n != want {
		t.Fatalf("the budget counts %d bytes, the caches hold %d", n, want)
	}
	// Read again: they survive the next sweep too.
	read()
	b.sweepIdle()
	if len(caches[0].m) != 3 || len(caches[1].m) != 1 {
		t.Fatalf("entries read again were dropped: %d and %d left", len(caches[0].m), len(caches[1].m))
	}
	// Not read since: the next sweep takes them.
	b.sweepIdle()
	if len(caches[0].m)+len(caches[1].m) != 0 || b.bytes.Load() != 0 {
		t.Fatalf("entries unread for a whole interval stayed: %d and %d, %d bytes", len(caches[0].m), len(caches[1].m), b.bytes.Load())
	}
	if caches[0].get(kvs[0][0]) != nil {
		t.Fatal("a dropped version is still served from the cache")
	}

	// An entry holding a list-item encoding stays for encodedIdleSweeps
	// unread sweeps; a read starts its count again.
	encoded := &fsm.KV{Key: fsm.Key{Resource: "r0", Name: "encoded"}, ModRevision: 1, Value: value}
	caches[0].put(encoded, &api.ServiceAccount{}, live)
	ten := []byte("0123456789")
	caches[0].m[encoded].pb.Store(&ten)
	plain := &fsm.KV{Key: fsm.Key{Resource: "r0", Name: "plain"}, ModRevision: 1, Value: value}
	caches[0].put(plain, &api.ServiceAccount{}, live)
	for i := 1; i < encodedIdleSweeps; i++ {
		b.sweepIdle()
		if caches[0].get(encoded) == nil {
			t.Fatalf("an entry with an encoding left after %d unread sweeps, want %d", i, encodedIdleSweeps)
		}
		if i == 1 && caches[0].m[plain] != nil {
			t.Fatal("an entry without encodings stayed past a sweep that found it unread")
		}
		// get marks it read: only the sweeps between reads count.
		caches[0].m[encoded].used.Store(false)
	}
	caches[0].entry(encoded)
	for i := 0; i < encodedIdleSweeps; i++ {
		b.sweepIdle()
	}
	if caches[0].get(encoded) == nil {
		t.Fatal("a read did not start the count of unread sweeps again")
	}
	caches[0].m[encoded].used.Store(false)
	b.sweepIdle()
	if caches[0].get(encoded) != nil {
		t.Fatalf("an entry with an encoding stayed past %d unread sweeps", encodedIdleSweeps)
	}
}
