package storage

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/trustplane/trustplane/fsm"
)

// Expiry deletes the stored objects of every resource with a TTL
// (ResourceConfig.TTL) once TTL has passed since their last write. It is
// kube-apiserver's etcd lease (--event-ttl) made of the log's own writes:
// the decision is the leader's, from its clock, and each expiry is an
// ordinary delete proposed through Raft, guarded by the ModRevision of the
// version that expired, so the fsm stays deterministic and an object
// written again in the meantime is kept (its new write starts a new TTL).
//
// Its Run is one leadership term (it is an api/controllers Runner). A term
// starts with one pass over the resources' keys, which gives every object
// a full TTL from now: a new leader, or a cluster after a restart, never
// expires an object before TTL has passed on its own clock. This is what
// etcd does with leases when its leader changes (lessor.Promote refreshes
// every lease). After that pass, the term follows the applied stream, so
// each write costs a heap push and each second nothing: there is no scan
// per tick, whatever the number of objects.
type Expiry struct {
	s     *Storage
	clock clock.Clock
}

// expiryBatch bounds the expired objects one round deletes, and
// expiryInFlight the deletes proposed at once, so that a burst of expiries
// is group-committed without flooding the log.
const (
	expiryBatch    = 256
	expiryInFlight = 16
	// expiryRetry is how long an object whose delete could not be proposed
	// (the node is losing leadership, the log is slow) waits to be tried
	// again within the term.
	expiryRetry = time.Second
)

// Expiry returns the expiry of this storage's resources with a TTL, on clk
// (nil: the real clock). Its Run does nothing but wait when no resource has
// a TTL or the storage has no Feed.
func (s *Storage) Expiry(clk clock.Clock) *Expiry {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Expiry{s: s, clock: clk}
}

// Run expires objects until ctx ends: call it only while this node leads
// (the deletes it proposes from a follower would fail, harmlessly). It
// returns nil when ctx ends, and an error when the term could not start.
func (e *Expiry) Run(ctx context.Context) error {
	e.s.mu.RLock()
	ttls := make(map[schema.GroupResource]time.Duration, len(e.s.ttls))
	for gr, ttl := range e.s.ttls {
		ttls[gr] = ttl
	}
	e.s.mu.RUnlock()
	if len(ttls) == 0 || e.s.feed == nil {
		<-ctx.Done()
		return nil
	}
	t, stop, err := e.start(ttls)
	if err != nil {
		return err
	}
	defer stop()
	for {
		if t.feed.takeRestored() {
			if err := t.load(); err != nil {
				return err
			}
		}
		t.follow()
		now := e.clock.Now()
		due := t.due(now)
		if len(due) > 0 {
			t.expire(ctx, due, now)
			continue
		}
		var (
			timer clock.Timer
			fire  <-chan time.Time
		)
		if next, ok := t.next(); ok {
			timer = e.clock.NewTimer(next.Sub(now))
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-t.feed.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// start subscribes a term to the applied stream and loads it; stop
// unsubscribes it.
func (e *Expiry) start(ttls map[schema.GroupResource]time.Duration) (t *expiryTerm, stop func(), err error) {
	t = &expiryTerm{e: e, ttls: ttls, feed: &expiryFeed{ttls: ttls, wake: make(chan struct{}, 1)}}
	// Subscribe first, then list: a write between the two is seen twice
	// and the list's revision tells which copy to drop.
	stop = e.s.feed.Subscribe(t.feed)
	if err := t.load(); err != nil {
		stop()
		return nil, nil, err
	}
	return t, stop, nil
}

// expiryTerm is one Run: the objects' deadlines, as a heap with lazy
// removal. live holds the current version of every object with a TTL;
// an entry whose version is no longer live is dropped when it comes due.
type expiryTerm struct {
	e    *Expiry
	ttls map[schema.GroupResource]time.Duration
	feed *expiryFeed
	// scanned is the revision the last load listed at: the stream's
	// changes at or below it are already in.
	scanned uint64
	live    map[fsm.Key]uint64
	queue   expiryHeap
}

// load lists every object with a TTL and gives each a full TTL from now.
func (t *expiryTerm) load() error {
	t.live, t.queue = map[fsm.Key]uint64{}, nil
	now := t.e.clock.Now()
	rev := t.e.s.backend.AppliedIndex()
	for gr, ttl := range t.ttls {
		p := fsm.Prefix{Space: fsm.SpaceBuiltin, Group: gr.Group, Resource: gr.Resource}
		after := ""
		for {
			res, err := t.e.s.backend.List(p, fsm.ListOptions{Revision: rev, StartAfter: after, Limit: 1024})
			if err != nil {
				return err
			}
			for _, kv := range res.KVs {
				t.put(kv.Key, kv.ModRevision, now.Add(ttl))
			}
			if !res.More || len(res.KVs) == 0 {
				break
			}
			after = res.KVs[len(res.KVs)-1].Key.String()
		}
	}
	t.scanned = rev
	return nil
}

func (t *expiryTerm) put(k fsm.Key, rev uint64, deadline time.Time) {
	t.live[k] = rev
	heap.Push(&t.queue, expiryEntry{key: k, rev: rev, deadline: deadline})
}

// follow takes in the writes and deletes applied since the last call.
func (t *expiryTerm) follow() {
	now := t.e.clock.Now()
	for _, ev := range t.feed.take() {
		if ev.Revision <= t.scanned {
			continue
		}
		k := ev.KV.Key
		switch ev.Type {
		case fsm.EventPut:
			t.put(k, ev.KV.ModRevision, now.Add(t.ttls[schema.GroupResource{Group: k.Group, Resource: k.Resource}]))
		case fsm.EventDelete:
			delete(t.live, k)
		}
	}
}

// due pops the live objects whose deadline has passed, at most
// expiryBatch of them.
func (t *expiryTerm) due(now time.Time) []expiryEntry {
	var out []expiryEntry
	for len(t.queue) > 0 && len(out) < expiryBatch && !t.queue[0].deadline.After(now) {
		en := heap.Pop(&t.queue).(expiryEntry)
		if t.live[en.key] == en.rev {
			out = append(out, en)
		}
	}
	return out
}

func (t *expiryTerm) next() (time.Time, bool) {
	if len(t.queue) == 0 {
		return time.Time{}, false
	}
	return t.queue[0].deadline, true
}

// expire deletes the expired versions, each only if it is still the
// current one. A delete that could not be proposed is tried again after
// expiryRetry, while the term lasts.
func (t *expiryTerm) expire(ctx context.Context, due []expiryEntry, now time.Time) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []expiryEntry
		slots  = make(chan struct{}, expiryInFlight)
	)
	for _, en := range due {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			_, err := t.e.s.backend.Propose(ctx, &fsm.Command{Op: fsm.OpDelete, Key: en.key, ModRevision: en.rev})
			if err != nil {
				mu.Lock()
				failed = append(failed, en)
				mu.Unlock()
			}
			// A failed precondition (written again, or deleted) is the
			// outcome wanted: the applied stream brings the change.
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for _, en := range failed {
		en.deadline = now.Add(expiryRetry)
		heap.Push(&t.queue, en)
	}
}

// expiryFeed is the term's listener on the applied stream: it queues the
// changes of resources with a TTL for the term's goroutine and never
// blocks the apply path.
type expiryFeed struct {
	ttls map[schema.GroupResource]time.Duration // read only
	wake chan struct{}

	mu       sync.Mutex
	pending  []fsm.Event
	restored bool
}

var _ fsm.RestoreListener = (*expiryFeed)(nil)

// OnApply queues the changes of resources with a TTL.
func (f *expiryFeed) OnApply(evs []fsm.Event) {
	queued := false
	for _, ev := range evs {
		k := ev.KV.Key
		if _, ok := f.ttls[schema.GroupResource{Group: k.Group, Resource: k.Resource}]; !ok || k.Space != fsm.SpaceBuiltin {
			continue
		}
		if !queued {
			f.mu.Lock()
			queued = true
		}
		f.pending = append(f.pending, ev)
	}
	if queued {
		f.mu.Unlock()
		f.signal()
	}
}

// OnIndex is not needed: deadlines come from the clock.
func (f *expiryFeed) OnIndex(uint64) {}

// OnRestore makes the term list its objects again: a snapshot replaced
// the state without a change for each object.
func (f *expiryFeed) OnRestore(uint64) {
	f.mu.Lock()
	f.restored = true
	f.pending = nil
	f.mu.Unlock()
	f.signal()
}

func (f *expiryFeed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *expiryFeed) take() []fsm.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.pending
	f.pending = nil
	return out
}

func (f *expiryFeed) takeRestored() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.restored
	f.restored = false
	return r
}

// expiryEntry is one version's deadline.
type expiryEntry struct {
	key      fsm.Key
	rev      uint64
	deadline time.Time
}

// expiryHeap orders entries by deadline (container/heap).
type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	en := old[len(old)-1]
	*h = old[:len(old)-1]
	return en
}
