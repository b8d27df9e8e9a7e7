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
	c := &objCache{}
	var enc atomic.Int64
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
		c.put(kv, obj(), liveFn, &enc)
		if len(c.m) > minSweepAt {
			t.Fatalf("after %d puts with 10 live keys the cache holds %d", i+1, len(c.m))
		}
	}
	// Swept entries release their cached encodings.
	b := []byte("0123456789")
	for _, e := range c.m {
		e.json.Store(&b)
		enc.Add(int64(len(b)))
	}
	live = map[fsm.Key]uint64{}
	for i := 0; len(c.m) > 0 && i < 10*minSweepAt; i++ {
		c.put(&fsm.KV{Key: fsm.Key{Resource: "serviceaccounts", Name: fmt.Sprint("gone-", i)}}, obj(), liveFn, &enc)
	}
	if n := enc.Load(); n != 0 {
		t.Fatalf("after every entry was swept %d bytes of encodings are still counted", n)
	}
	// Replaced versions of one key are swept too.
	live = map[fsm.Key]uint64{}
	one := fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: "one"}
	for i := 0; i < 10*minSweepAt; i++ {
		kv := &fsm.KV{Key: one, ModRevision: uint64(i + 1)}
		live[one] = kv.ModRevision
		c.put(kv, obj(), liveFn, &enc)
		if len(c.m) > minSweepAt {
			t.Fatalf("after %d updates of one key the cache holds %d", i+1, len(c.m))
		}
	}
	// A version is served only for its own KV.
	k := fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: "x"}
	kv, same := &fsm.KV{Key: k, ModRevision: 100}, &api.ServiceAccount{}
	c.put(kv, same, liveFn, &enc)
	if got := c.get(kv); got != same {
		t.Fatalf("the cached version was not served")
	}
	if got := c.get(&fsm.KV{Key: k, ModRevision: 101}); got != nil {
		t.Fatalf("a version the cache does not hold was served")
	}
}
