package storage

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustplane/trustplane/fsm"
)

// objCache holds decoded internal objects keyed by the stored version they
// decode, the immutable *fsm.KV the fsm hands out for it (the same pointer
// for every read of that version), so that a list of unchanged objects
// does not decode them again.
//
// The cached objects are shared and must never be modified: Get, Decode
// and the update loop hand out deep copies; only GetList, whose items are
// read, copied by value into the list and encoded, and ItemJSON use them
// directly.
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
// encodings as an item of a list in the external version: JSON (no kind or
// apiVersion) and protobuf (the message alone, as a list's items field
// holds it). An encoding is kept only while the node's cached encodings stay
// within maxItemEncodingBytes; past it, it is computed for each list.
type cachedObj struct {
	obj      runtime.Object
	json, pb atomic.Pointer[[]byte]
}

// maxItemEncodingBytes bounds the list-item encodings the object caches of a
// node hold, over every resource and both formats. They save most of a large
// list's CPU (a 10,000-item list of 1 KiB objects caches about 12 MB per
// format) but cost memory beside the decoded objects, and a client that lists
// everything once (an informer starting on a node with many objects) should
// not make them a third copy of the store. Encodings of versions that are no
// longer live are released with their entries.
const maxItemEncodingBytes = 128 << 20

// encodingBytes is what e's cached encodings count against
// maxItemEncodingBytes.
func (e *cachedObj) encodingBytes() int64 {
	var n int64
	if b := e.json.Load(); b != nil {
		n += int64(len(*b))
	}
	if b := e.pb.Load(); b != nil {
		n += int64(len(*b))
	}
	return n
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
// Entries swept release their encodings from enc (Storage.itemEncodings).
func (c *objCache) put(kv *fsm.KV, obj runtime.Object, live func(fsm.Key) (uint64, bool), enc *atomic.Int64) {
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
	for k, e := range c.m {
		if rev, ok := live(k.Key); !ok || rev != k.ModRevision {
			delete(c.m, k)
			if n := e.encodingBytes(); n > 0 {
				enc.Add(-n)
			}
		}
	}
	c.sweepAt = max(2*len(c.m), minSweepAt)
}

// DecodeShared returns the decoded internal object of kv, with its
// resourceVersion set, from the cache when it holds that version. The
// object is shared: callers must not modify it.
func (s *Store) DecodeShared(kv *fsm.KV) (runtime.Object, error) {
	c := &s.objs
	if obj := c.get(kv); obj != nil {
		return obj, nil
	}
	obj, err := s.decodeValue(kv)
	if err != nil {
		return nil, err
	}
	c.put(kv, obj, s.liveRevision, &s.itemEncodings)
	return obj, nil
}

// Unshared returns a shallow copy of a shared decoded object (a new top-level
// struct whose fields still point into the shared one), for handing to an
// encoder: kube's versioning codec sets the GroupVersionKind of the object
// it encodes and restores it afterwards, a write to the top level only, and
// conversion and serialization read everything below it. Anything that
// changes a field below the top level (metadata included) needs a deep
// copy instead.
func Unshared(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return obj.DeepCopyObject()
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(runtime.Object)
}

// Decode turns a stored value into an internal object carrying its
// resourceVersion. The object is the caller's to modify: a copy of the
// shared decoded version.
func (s *Store) Decode(kv *fsm.KV) (runtime.Object, error) {
	obj, err := s.DecodeShared(kv)
	if err != nil {
		return nil, err
	}
	return obj.DeepCopyObject(), nil
}

// decodeValue decrypts and decodes kv's stored bytes into a new internal
// object carrying its resourceVersion.
func (s *Store) decodeValue(kv *fsm.KV) (runtime.Object, error) {
	plain, _, err := s.atRest.Open(kv)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	obj, _, err := s.codec.Decode(plain, nil, s.newFunc())
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("decoding stored %s %q: %w", s.gvr.Resource, kv.Key.Name, err))
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

// entryFor returns kv's cache entry, decoding kv if it is not cached.
func (s *Store) entryFor(kv *fsm.KV) (*cachedObj, error) {
	if e := s.objs.entry(kv); e != nil {
		return e, nil
	}
	if _, err := s.DecodeShared(kv); err != nil {
		return nil, err
	}
	if e := s.objs.entry(kv); e != nil {
		return e, nil
	}
	return nil, fmt.Errorf("object cache lost %s", kv.Key)
}

// ItemJSON is kv's JSON as an item of a list in the resource's external
// version: what the JSON serializer writes for it inside the list, cached
// per stored version (within maxItemEncodingBytes) and shared: it must not
// be modified.
func (s *Store) ItemJSON(kv *fsm.KV) ([]byte, error) {
	return s.itemEncoding(kv, func(e *cachedObj) *atomic.Pointer[[]byte] { return &e.json }, func(out runtime.Object) ([]byte, error) {
		// List items carry no kind or apiVersion of their own.
		out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		return json.Marshal(out)
	})
}

// ItemProtobuf is kv's protobuf message in the resource's external version,
// as a list's items field holds it (kube's generated Marshal, which writes
// no kind or apiVersion), cached per stored version (within
// maxItemEncodingBytes) and shared: it must not be modified.
func (s *Store) ItemProtobuf(kv *fsm.KV) ([]byte, error) {
	return s.itemEncoding(kv, func(e *cachedObj) *atomic.Pointer[[]byte] { return &e.pb }, func(out runtime.Object) ([]byte, error) {
		m, ok := out.(interface{ Marshal() ([]byte, error) })
		if !ok {
			return nil, fmt.Errorf("%T has no protobuf encoding", out)
		}
		return m.Marshal()
	})
}

// itemEncoding returns the encoding of kv that field selects, encoding the
// external version of its decoded object with encode when it is not cached,
// and caching the result while the node's cached encodings stay within
// maxItemEncodingBytes. Errors are not cached.
func (s *Store) itemEncoding(kv *fsm.KV, field func(*cachedObj) *atomic.Pointer[[]byte], encode func(runtime.Object) ([]byte, error)) ([]byte, error) {
	e, err := s.entryFor(kv)
	if err != nil {
		return nil, err
	}
	slot := field(e)
	if b := slot.Load(); b != nil {
		return *b, nil
	}
	out, err := s.convertor.ConvertToVersion(e.obj, s.gvr.GroupVersion())
	if err != nil {
		return nil, err
	}
	b, err := encode(out)
	if err != nil {
		return nil, err
	}
	n := int64(len(b))
	if s.itemEncodings.Add(n) > s.maxItemEncodings {
		s.itemEncodings.Add(-n)
		return b, nil
	}
	if !slot.CompareAndSwap(nil, &b) {
		// Another list cached it meanwhile: the same bytes.
		s.itemEncodings.Add(-n)
		return *slot.Load(), nil
	}
	return b, nil
}
