package registry

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/fsm"
)

// objCache holds decoded internal objects keyed by the stored version they
// decode, the immutable *fsm.KV the fsm hands out for it (the same pointer
// for every read of that version), so that a list of unchanged objects
// does not decode them again.
//
// The cached objects are shared and must never be modified: decode hands
// out deep copies; only List, whose items are read, copied by value into
// the list and encoded, uses them directly.
//
// Versions that are no longer live (replaced or deleted) are dropped by a
// sweep that runs when the cache has grown to twice its size after the
// previous sweep, so it stays within about twice the number of live keys
// read.
type objCache struct {
	mu      sync.RWMutex
	m       map[*fsm.KV]runtime.Object
	sweepAt int
}

// minSweepAt is the size below which the cache is never swept.
const minSweepAt = 4096

// get returns the shared decoded object of kv, or nil.
func (c *objCache) get(kv *fsm.KV) runtime.Object {
	c.mu.RLock()
	obj := c.m[kv]
	c.mu.RUnlock()
	return obj
}

// put records obj as the decoded object of kv. live reports the current
// ModRevision of a key (ok false when it is gone), for the sweep.
func (c *objCache) put(kv *fsm.KV, obj runtime.Object, live func(fsm.Key) (uint64, bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[*fsm.KV]runtime.Object)
		c.sweepAt = minSweepAt
	}
	c.m[kv] = obj
	if len(c.m) < c.sweepAt {
		return
	}
	for k := range c.m {
		if rev, ok := live(k.Key); !ok || rev != k.ModRevision {
			delete(c.m, k)
		}
	}
	c.sweepAt = max(2*len(c.m), minSweepAt)
}

// decodeShared returns the decoded internal object of kv, with its
// resourceVersion set, from the cache when it holds that version. The
// object is shared: callers must not modify it.
func (s *Store) decodeShared(kv *fsm.KV) (runtime.Object, error) {
	c := &s.objs
	if obj := c.get(kv); obj != nil {
		return obj, nil
	}
	obj, err := s.decodeValue(kv)
	if err != nil {
		return nil, err
	}
	c.put(kv, obj, s.liveRevision)
	return obj, nil
}

// decodeValue decodes kv's stored bytes into a new internal object carrying
// its resourceVersion.
func (s *Store) decodeValue(kv *fsm.KV) (runtime.Object, error) {
	obj, _, err := s.codec.Decode(kv.Value, nil, s.NewFunc())
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("decoding stored %s %q: %w", s.GVR.Resource, kv.Key.Name, err))
	}
	setRV(obj, kv.ModRevision)
	return obj, nil
}

// liveRevision is the ModRevision of key in the latest applied state.
func (s *Store) liveRevision(key fsm.Key) (uint64, bool) {
	kv, _, err := s.backend.Get(key, 0)
	if err != nil || kv == nil {
		return 0, false
	}
	return kv.ModRevision, true
}
