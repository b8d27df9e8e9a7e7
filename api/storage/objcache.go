package storage

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
// Three things bound it. Versions that are no longer live (replaced or
// deleted) are dropped by a sweep that runs when the cache has grown to
// twice its size after the previous sweep. And the decoded objects of every
// store of a node together stay within the node's budget (objBudget,
// maxCachedObjectBytes): past it, entries are evicted, those not read since
// the previous eviction first (a clock), and a version evicted is decoded
// again the next time it is read, as a new shared object. And every
// idleSweepInterval the entries not read since the previous sweep leave
// (objBudget.sweepIdle), so a node that has stopped reading them does not
// keep them for the collector to mark.
type objCache struct {
	budget *objBudget

	mu       sync.RWMutex
	m        map[*fsm.KV]*cachedObj
	sweepAt  int
	sweeping bool
	// forgotten is set once the store is forgotten (Storage.Forget):
	// nothing is cached any more.
	forgotten bool
}

// cachedObj is one decoded stored version and, computed on first use, its
// encodings as an item of a list in the external version: JSON (no kind or
// apiVersion) and protobuf (the message alone, as a list's items field
// holds it). An encoding is kept only while the node's cached encodings stay
// within maxItemEncodingBytes; past it, it is computed for each list.
type cachedObj struct {
	obj      runtime.Object
	json, pb atomic.Pointer[[]byte]
	// cost is what the entry counts against the node's objBudget.
	cost int64
	// used is set when the entry is read, cleared by an eviction that
	// passes over it: entries not read since the last eviction go first.
	used atomic.Bool
	// idle counts the idle sweeps in a row that found the entry unread;
	// only sweepIdle touches it, under its cache's lock.
	idle int
	// released is set once the entry has left its cache; an encoding
	// stored after that is taken back by whoever stored it (itemEncoding).
	released atomic.Bool
}

// maxItemEncodingBytes bounds the list-item encodings the object caches of a
// node hold, over every resource and both formats. They save most of a large
// list's CPU (a 10,000-item list of 1 KiB objects caches about 12 MB per
// format) but cost memory beside the decoded objects, and a client that lists
// everything once (an informer starting on a node with many objects) should
// not make them a third copy of the store. Encodings of versions that are no
// longer live are released with their entries.
const maxItemEncodingBytes = 128 << 20

// idleSweepInterval is how often the object caches drop the entries nobody
// read lately (objBudget.sweepIdle), whatever the budget. An entry holding
// a decoded object only leaves at the first sweep that finds it unread
// since the previous one: 5–10 s after its last read. Decoded objects are
// pointer-rich, so each one held costs every collection its marking, and
// most are read once: the leader decodes every object written for its
// controllers' watch and reads almost none again (a shorter interval took
// about 9% off the leader's CPU per follower create; BENCHMARKS, issue 32). An entry that also holds list-item encodings stays until
// encodedIdleSweeps sweeps in a row found it unread.
const idleSweepInterval = 5 * time.Second

// encodedIdleSweeps is how many sweeps in a row an entry holding list-item
// encodings may be found unread before it leaves: about 30 s. The
// encodings are bytes, which the collector does not scan, and they are
// what a list repeated every few seconds (a dashboard, a poller) saves
// most of its CPU with.
const encodedIdleSweeps = 6

// maxCachedObjectBytes bounds the decoded objects the object caches of a
// node hold, over every resource, as objectCost estimates them. Without a
// bound every stored version ever read or watched stays decoded, a second
// copy of the store beside the fsm's (about 2 KiB of heap for a 1 KiB
// object: 200 MiB at 100,000 objects). 64 MiB holds the objects of a
// 10,000-item list of 1 KiB objects twice over; a version evicted costs a
// decode when it is read again.
const maxCachedObjectBytes = 64 << 20

// objectCost estimates the heap a decoded object of kv holds: about twice
// its stored encoding (strings and maps of the decoded form, the map entry
// and cachedObj around it).
func objectCost(kv *fsm.KV) int64 { return 2*int64(len(kv.Value)) + 256 }

// objBudget is a node's budget of decoded objects, shared by the object
// caches of every store (Storage.ForResource registers them), so that the
// resources that are read get the room and the node's total stays bounded.
type objBudget struct {
	max int64
	// bytes is the cost of the entries every cache holds.
	bytes atomic.Int64
	// enc counts the cached list-item encodings (Storage.itemEncodings);
	// an entry that leaves releases its encodings from it.
	enc *atomic.Int64
	// evicting is set while one eviction runs; a put that finds it set
	// leaves the work to it.
	evicting atomic.Bool

	mu     sync.Mutex
	caches []*objCache
}

// register makes c one of the caches b bounds.
func (b *objBudget) register(c *objCache) {
	b.mu.Lock()
	b.caches = append(b.caches, c)
	b.mu.Unlock()
	c.budget = b
}

// release takes a removed entry's cost and encodings off the node's counts.
// It runs once per entry: by whoever removed it from its map.
func (b *objBudget) release(e *cachedObj) {
	b.bytes.Add(-e.cost)
	e.released.Store(true)
	for _, slot := range []*atomic.Pointer[[]byte]{&e.json, &e.pb} {
		if p := slot.Swap(nil); p != nil {
			b.enc.Add(-int64(len(*p)))
		}
	}
}

// evict brings the caches down to three quarters of the budget when they
// are over it, taking from every cache in proportion to what it holds.
func (b *objBudget) evict() {
	if !b.evicting.CompareAndSwap(false, true) {
		return
	}
	defer b.evicting.Store(false)
	total, target := b.bytes.Load(), b.max*3/4
	if total <= b.max {
		return
	}
	b.mu.Lock()
	caches := append([]*objCache(nil), b.caches...)
	b.mu.Unlock()
	for _, c := range caches {
		c.shrink(float64(total-target) / float64(total))
	}
}

// sweepIdle drops, from every cache, the entries not read since the
// previous sweep (those holding list-item encodings only once
// encodedIdleSweeps sweeps in a row found them so), and clears the mark
// of the others. Decoded objects are pointer-rich: every collection marks
// each one, so a cache full of objects decoded once (for a watch event, a
// list long past) costs the collector CPU on every request while the node
// serves other work. A version dropped is decoded again the next time it
// is read.
func (b *objBudget) sweepIdle() {
	b.mu.Lock()
	caches := append([]*objCache(nil), b.caches...)
	b.mu.Unlock()
	for _, c := range caches {
		c.mu.Lock()
		for k, e := range c.m {
			if e.used.Swap(false) {
				e.idle = 0
				continue
			}
			e.idle++
			if e.idle < e.idleSweepsAllowed() {
				continue
			}
			delete(c.m, k)
			c.budget.release(e)
		}
		c.mu.Unlock()
	}
}

// idleSweepsAllowed is how many idle sweeps in a row may find e unread
// before it leaves (idleSweepInterval).
func (e *cachedObj) idleSweepsAllowed() int {
	if e.json.Load() != nil || e.pb.Load() != nil {
		return encodedIdleSweeps
	}
	return 1
}

// sweepIdleLoop runs sweepIdle every idleSweepInterval until stop closes.
func (b *objBudget) sweepIdleLoop(stop <-chan struct{}) {
	t := time.NewTicker(idleSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			b.sweepIdle()
		}
	}
}

// unregister takes c out of the caches b bounds, releasing its entries;
// c caches nothing afterwards.
func (b *objBudget) unregister(c *objCache) {
	b.mu.Lock()
	for i, other := range b.caches {
		if other == c {
			b.caches = append(b.caches[:i:i], b.caches[i+1:]...)
			break
		}
	}
	b.mu.Unlock()
	c.mu.Lock()
	c.forgotten = true
	for k, e := range c.m {
		delete(c.m, k)
		c.budget.release(e)
	}
	c.mu.Unlock()
}

// shrink evicts about frac of c's entries: those not read since the last
// eviction first (clearing the mark of those it passes over), then any.
func (c *objCache) shrink(frac float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int(frac*float64(len(c.m)) + 0.5)
	for pass := 0; pass < 2 && n > 0; pass++ {
		for k, e := range c.m {
			if n == 0 {
				break
			}
			if pass == 0 && e.used.Swap(false) {
				continue
			}
			delete(c.m, k)
			c.budget.release(e)
			n--
		}
	}
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

// entry returns kv's cache entry, or nil, and marks it read.
func (c *objCache) entry(kv *fsm.KV) *cachedObj {
	c.mu.RLock()
	e := c.m[kv]
	c.mu.RUnlock()
	if e != nil && !e.used.Load() {
		e.used.Store(true)
	}
	return e
}

// put records obj as the decoded object of kv and returns the shared
// object of kv: obj, or the one another caller put first. live reports the
// current ModRevision of a key (ok false when it is gone), for the sweep of
// versions no longer live.
func (c *objCache) put(kv *fsm.KV, obj runtime.Object, live func(fsm.Key) (uint64, bool)) runtime.Object {
	c.mu.Lock()
	if c.forgotten {
		c.mu.Unlock()
		return obj
	}
	if c.m == nil {
		c.m = make(map[*fsm.KV]*cachedObj)
		c.sweepAt = minSweepAt
	}
	if e, ok := c.m[kv]; ok {
		c.mu.Unlock()
		return e.obj
	}
	// Not marked used: a version decoded once and never read again is
	// the first to go.
	e := &cachedObj{obj: obj, cost: objectCost(kv)}
	c.m[kv] = e
	sweep := len(c.m) >= c.sweepAt && !c.sweeping
	if sweep {
		c.sweeping = true
	}
	c.mu.Unlock()
	if c.budget.bytes.Add(e.cost) > c.budget.max {
		c.budget.evict()
	}
	if sweep {
		c.sweepDead(live)
	}
	return obj
}

// sweepDead drops the entries of versions that are no longer live. It asks
// live about each without holding c's lock (a version that is not live
// never becomes live again: a new version is a new *fsm.KV), so reads and
// puts go on meanwhile.
func (c *objCache) sweepDead(live func(fsm.Key) (uint64, bool)) {
	c.mu.RLock()
	kvs := make([]*fsm.KV, 0, len(c.m))
	for k := range c.m {
		kvs = append(kvs, k)
	}
	c.mu.RUnlock()
	dead := kvs[:0]
	for _, k := range kvs {
		if rev, ok := live(k.Key); !ok || rev != k.ModRevision {
			dead = append(dead, k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range dead {
		if e, ok := c.m[k]; ok {
			delete(c.m, k)
			c.budget.release(e)
		}
	}
	c.sweepAt = max(2*len(c.m), minSweepAt)
	c.sweeping = false
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
	return c.put(kv, obj, s.liveRevision), nil
}

// Unshared returns a shallow copy of a shared decoded object (a new top-level
// struct whose fields still point into the shared one), for handing to an
// encoder: kube's versioning codec sets the GroupVersionKind of the object
// it encodes and restores it afterwards, a write to the top level only, and
// conversion and serialization read everything below it. Anything that
// changes a field below the top level (metadata included) needs a deep
// copy instead.
func Unshared(obj runtime.Object) runtime.Object {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Its kind is two keys of its top-level map, which is copied.
		return &unstructured.Unstructured{Object: maps.Clone(u.Object)}
	}
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
		// Not err itself: decoders quote what they could not read (kube's
		// "Object 'Kind' is missing in '...'"), and stored bytes may be a
		// Secret or a key. The key names the object; nothing says more.
		return nil, apierrors.NewInternalError(fmt.Errorf("%w: %s %q at resourceVersion %d",
			ErrUndecodable, s.gr(), kv.Key.Name, kv.ModRevision))
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
		// Built-in list items carry no kind or apiVersion of their own;
		// custom ones do, as in kube.
		if _, custom := out.(runtime.Unstructured); !custom {
			out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		}
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
	return s.keepEncoding(e, slot, b), nil
}

// keepEncoding caches b, an encoding of e's object, in e's slot while the
// node's cached encodings stay within maxItemEncodings, and returns the
// encoding to use: b, or the same bytes another list cached first.
func (s *Storage) keepEncoding(e *cachedObj, slot *atomic.Pointer[[]byte], b []byte) []byte {
	n := int64(len(b))
	if s.itemEncodings.Add(n) > s.maxItemEncodings {
		s.itemEncodings.Add(-n)
		return b
	}
	if !slot.CompareAndSwap(nil, &b) {
		// Another list cached it meanwhile: the same bytes.
		s.itemEncodings.Add(-n)
		if p := slot.Load(); p != nil {
			return *p
		}
		return b
	}
	if e.released.Load() && slot.CompareAndSwap(&b, nil) {
		// The entry left its cache meanwhile and its release did not see
		// this encoding: take it back, or it would be counted for good.
		s.itemEncodings.Add(-n)
	}
	return b
}
