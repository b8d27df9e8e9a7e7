package registry

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
	m       map[*fsm.KV]*cachedObj
	sweepAt int
}

// cachedObj is one decoded stored version and, computed on first use, its
// JSON as an item of a list (external version, no kind or apiVersion).
type cachedObj struct {
	obj      runtime.Object
	jsonOnce sync.Once
	json     []byte
	jsonErr  error
}

// minSweepAt is the size below which the cache is never swept.
const minSweepAt = 4096

// get returns the shared decoded object of kv, or nil.
func (c *objCache) get(kv *fsm.KV) runtime.Object {
	if e := c.entry(kv); e != nil {
		return e.obj
	}
	return nil
}

// entry returns kv's cache entry, or nil.
func (c *objCache) entry(kv *fsm.KV) *cachedObj {
	c.mu.RLock()
	e := c.m[kv]
	c.mu.RUnlock()
	return e
}

// put records obj as the decoded object of kv. live reports the current
// ModRevision of a key (ok false when it is gone), for the sweep.
func (c *objCache) put(kv *fsm.KV, obj runtime.Object, live func(fsm.Key) (uint64, bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[*fsm.KV]*cachedObj)
		c.sweepAt = minSweepAt
	}
	if _, ok := c.m[kv]; !ok {
		c.m[kv] = &cachedObj{obj: obj}
	}
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

// decodeValue decrypts and decodes kv's stored bytes into a new internal object carrying
// its resourceVersion.
func (s *Store) decodeValue(kv *fsm.KV) (runtime.Object, error) {
	plain, _, err := s.atRest.Open(kv)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	obj, _, err := s.codec.Decode(plain, nil, s.NewFunc())
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

// itemJSON is kv's JSON as an item of a list in the resource's external
// version: what the JSON serializer writes for it inside the list, computed
// once per stored version and shared.
func (s *Store) itemJSON(kv *fsm.KV) ([]byte, error) {
	e := s.objs.entry(kv)
	if e == nil {
		if _, err := s.decodeShared(kv); err != nil {
			return nil, err
		}
		if e = s.objs.entry(kv); e == nil {
			return nil, fmt.Errorf("object cache lost %s", kv.Key)
		}
	}
	e.jsonOnce.Do(func() {
		out, err := Scheme.ConvertToVersion(e.obj, s.GVR.GroupVersion())
		if err != nil {
			e.jsonErr = err
			return
		}
		// List items carry no kind or apiVersion of their own.
		out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		e.json, e.jsonErr = json.Marshal(out)
	})
	return e.json, e.jsonErr
}

// WriteListJSON writes list exactly as the JSON serializer writes the
// external list (encoding/json plus a newline), splicing the cached JSON of
// each item instead of converting and encoding every object again. kvs are
// the stored versions of list's items, in order (ListVersions).
func (s *Store) WriteListJSON(w io.Writer, list runtime.Object, kvs []*fsm.KV) error {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	metaJSON, err := json.Marshal(metav1.ListMeta{
		ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount(),
	})
	if err != nil {
		return err
	}
	kind, _ := json.Marshal(s.KindName + "List")
	apiVersion, _ := json.Marshal(s.GVR.GroupVersion().String())
	items := make([][]byte, len(kvs))
	size := 64 + len(metaJSON)
	for i, kv := range kvs {
		if items[i], err = s.itemJSON(kv); err != nil {
			return err
		}
		size += len(items[i]) + 1
	}
	buf := make([]byte, 0, size)
	buf = append(buf, `{"kind":`...)
	buf = append(buf, kind...)
	buf = append(buf, `,"apiVersion":`...)
	buf = append(buf, apiVersion...)
	buf = append(buf, `,"metadata":`...)
	buf = append(buf, metaJSON...)
	buf = append(buf, `,"items":[`...)
	for i, item := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, item...)
	}
	buf = append(buf, "]}\n"...)
	_, err = w.Write(buf)
	return err
}
