package watchcache

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trustplane/trustplane/fsm"
)

// readChunk bounds how many events a watcher copies out of the window per
// read lock, so a watcher catching up never holds the lock for long.
const readChunk = 256

// maxOutBuffer bounds a watcher's Events channel. The window is the real
// buffer; the channel only smooths delivery to a reader that drains it.
const maxOutBuffer = 64

// Cache is one node's window of applied events and the watchers served
// from it. It is an fsm.Listener and fsm.RestoreListener, subscribed by
// New; nothing else feeds it.
type Cache struct {
	cfg       Config
	f         *fsm.FSM
	cancelSub func()

	// mu guards everything below. The apply path holds it for writing only
	// to append, trim and wake watchers; watchers hold it for reading only
	// to copy a chunk of item pointers. It is never held across an fsm call
	// or a channel send that could block.
	mu sync.RWMutex
	// items[head:] is the window, in revision order; bytes is their
	// eventBytes sum.
	items []*item
	head  int
	bytes int64
	// start: the window holds every change with a revision in
	// (start, progress], so a watch can start after any revision >= start.
	start uint64
	// progress is the applied index the fsm last reported (OnIndex).
	progress uint64
	groups   map[fsm.Prefix]map[*Watcher]struct{}
	hit      map[fsm.Prefix]bool // scratch for OnIndex
	closed   bool

	// appended counts every event ever appended; a watcher compares it
	// with its value when the watcher's client stopped reading.
	appended atomic.Uint64
	// slow counts the watchers that ended with ErrSlowWatcher (Stats).
	slow atomic.Uint64

	running sync.WaitGroup // one per watcher goroutine
}

var (
	_ fsm.Listener        = (*Cache)(nil)
	_ fsm.RestoreListener = (*Cache)(nil)
)

// New builds a cache over f and subscribes it to f's applied stream. The
// window starts as the fsm's retained history (everything after its
// compacted revision, within MaxEvents), so a node that restarted from a
// snapshot and replayed its log can still resume watches from before the
// restart. It subscribes before reading that history and drops what
// overlaps, so no change falls between the two. cfg nil means
// DefaultConfig(); cfg is copied.
func New(cfg *Config, f *fsm.FSM) (*Cache, error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cache{
		cfg:    *cfg,
		f:      f,
		groups: make(map[fsm.Prefix]map[*Watcher]struct{}),
		hit:    make(map[fsm.Prefix]bool),
	}
	if c.cfg.Decode == nil {
		c.cfg.Decode = identity
	}
	c.cancelSub = f.Subscribe(c)
	evs, applied, compacted, err := c.history()
	if err != nil {
		c.cancelSub()
		return nil, err
	}
	c.mu.Lock()
	c.installLocked(evs, applied, compacted, false)
	c.mu.Unlock()
	return c, nil
}

// history reads the fsm's whole retained history. A compaction may land
// between reading the compacted revision and the history; then it retries.
func (c *Cache) history() ([]fsm.Event, uint64, uint64, error) {
	for range 100 {
		compacted := c.f.CompactedRevision()
		evs, applied, err := c.f.History(fsm.Prefix{}, compacted)
		if err == nil {
			return evs, applied, compacted, nil
		}
		if !errors.Is(err, fsm.ErrCompacted) {
			return nil, 0, 0, fmt.Errorf("watchcache: load history: %w", err)
		}
	}
	return nil, 0, 0, errors.New("watchcache: load history: compacted revision keeps moving")
}

// installLocked makes history (complete up to applied, starting after
// compacted) the window. With replace unset, changes already received live
// beyond applied are kept after it (subscribe, then replay).
func (c *Cache) installLocked(evs []fsm.Event, applied, compacted uint64, replace bool) {
	now := c.now()
	var live []*item
	if !replace {
		for _, it := range c.items[c.head:] {
			if it.ev.Revision > applied {
				live = append(live, it)
			}
		}
	}
	// Drop what MaxEvents would trim before building items: the items of
	// one history share one allocation, which a partial trim would pin.
	if over := min(len(evs)+len(live)-c.cfg.MaxEvents, len(evs)); over > 0 {
		compacted = evs[over-1].Revision
		evs = evs[over:]
	}
	block := make([]item, len(evs))
	items := make([]*item, 0, len(evs)+len(live))
	for i, e := range evs {
		block[i] = item{ev: e, at: now}
		items = append(items, &block[i])
	}
	c.items, c.head = append(items, live...), 0
	c.bytes = 0
	for _, it := range c.items {
		c.bytes += eventBytes(&it.ev)
	}
	c.start = compacted
	if replace || applied > c.progress {
		c.progress = applied
	}
	c.trimLocked(now)
}

func (c *Cache) now() int64 { return c.cfg.Clock.Now().UnixNano() }

// OnApply appends the batch to the window. Its contract (fsm.Listener):
// it runs on the apply path, so it only takes the lock to append; waking
// watchers happens in OnIndex, which the fsm calls right after.
func (c *Cache) OnApply(events []fsm.Event) {
	now := c.now()
	block := make([]item, len(events))
	for i, e := range events {
		block[i] = item{ev: e, at: now}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	n := 0
	for i := range block {
		if block[i].ev.Revision <= c.progress {
			// Already in the window: New read the fsm's history after this
			// batch was applied but before it was announced (subscribe,
			// then replay). The window never holds an event twice.
			continue
		}
		c.items = append(c.items, &block[i])
		c.bytes += eventBytes(&block[i].ev)
		n++
	}
	c.appended.Add(uint64(n))
}

// OnIndex records the node's applied index, which bookmarks carry even
// when nothing a watcher selects has changed, trims the window, and wakes
// the watchers that have something new. It never waits for a watcher: one
// whose client has not read while more than WatcherBuffer events were
// applied, or that the window has moved past, is cut off here with
// ErrSlowWatcher; one that has nothing new is moved forward in place, so
// idle watchers cost no wake-up.
func (c *Cache) OnIndex(index uint64) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	prev := c.progress
	if index > c.progress {
		c.progress = index
	}
	c.trimLocked(now)
	if len(c.groups) == 0 {
		return
	}
	clear(c.hit)
	for i := len(c.items) - 1; i >= c.head && c.items[i].ev.Revision > prev; i-- {
		k := c.items[i].ev.KV.Key
		c.hit[fsm.Prefix{Space: k.Space, Group: k.Group, Resource: k.Resource}] = true
		c.hit[fsm.Prefix{Space: k.Space, Group: k.Group, Resource: k.Resource, Namespace: k.Namespace}] = true
	}
	for p, ws := range c.groups {
		hit := c.hit[p]
		for w := range ws {
			pos := w.pos.Load()
			switch {
			case pos < c.start:
				c.cutLocked(w, ErrSlowWatcher)
			case w.stalled(c.appended.Load()) > uint64(c.cfg.WatcherBuffer):
				c.cutLocked(w, ErrSlowWatcher)
			case hit:
				w.wake()
			case pos == prev:
				// Caught up and nothing new for it: it has now seen
				// everything up to index. If its goroutine moved pos
				// meanwhile, the CAS fails and it looks for itself.
				if !w.pos.CompareAndSwap(prev, c.progress) {
					w.wake()
				}
			case pos < prev:
				w.wake()
			}
			// pos > prev: waiting for a future revision; nothing to do.
		}
	}
}

// OnRestore rebuilds the window from the restored fsm's history: Restore
// replaced the state and the applied stream jumped to index, but the
// snapshot carries the MVCC history, so the changes in between are not
// lost. Watchers positioned inside the new window carry on from their
// position (they get the changes they missed, in order); those before it
// can never catch up and are cut off.
func (c *Cache) OnRestore(index uint64) {
	evs, applied, compacted, err := c.history()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if err != nil {
		// Cannot happen on the apply path (nothing compacts concurrently);
		// start an empty window at index rather than serve a wrong one.
		evs, applied, compacted = nil, index, index
	}
	c.installLocked(evs, applied, compacted, true)
	for _, ws := range c.groups {
		for w := range ws {
			if w.pos.Load() < c.start {
				c.cutLocked(w, ErrSlowWatcher)
			} else {
				w.wake()
			}
		}
	}
}

// trimLocked drops events older than Window and beyond MaxEvents or
// MaxBytes from the front, moving start to the newest revision dropped.
func (c *Cache) trimLocked(now int64) {
	cutoff := now - int64(c.cfg.Window)
	for c.head < len(c.items) {
		it := c.items[c.head]
		if len(c.items)-c.head <= c.cfg.MaxEvents && c.bytes <= c.cfg.MaxBytes && it.at >= cutoff {
			break
		}
		c.start = it.ev.Revision
		c.bytes -= eventBytes(&it.ev)
		c.items[c.head] = nil
		c.head++
	}
	switch {
	case c.head == len(c.items):
		c.items, c.head = c.items[:0], 0
	case c.head >= 1024 && c.head*2 >= len(c.items):
		// Slide the window back to the front of the array; amortised O(1)
		// per dropped event.
		n := copy(c.items, c.items[c.head:])
		clear(c.items[n:])
		c.items, c.head = c.items[:n], 0
	}
}

// searchLocked is the index in items of the first event after rev.
func (c *Cache) searchLocked(rev uint64) int {
	w := c.items[c.head:]
	return c.head + sort.Search(len(w), func(i int) bool { return w[i].ev.Revision > rev })
}

// read copies up to cap(buf) (at least readChunk) events after pos into buf.
// progress is the applied index at the time of the read; more says whether
// events remain. ok is false if the window has moved past pos.
func (c *Cache) read(pos uint64, buf []*item) (items []*item, progress uint64, more, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if pos < c.start {
		return buf, 0, false, false
	}
	i := c.searchLocked(pos)
	n := min(len(c.items)-i, max(cap(buf), readChunk))
	buf = append(buf, c.items[i:i+n]...)
	return buf, c.progress, i+n < len(c.items), true
}

func (c *Cache) addLocked(w *Watcher) {
	ws := c.groups[w.opts.Prefix]
	if ws == nil {
		ws = make(map[*Watcher]struct{})
		c.groups[w.opts.Prefix] = ws
	}
	ws[w] = struct{}{}
}

func (c *Cache) removeLocked(w *Watcher) {
	ws := c.groups[w.opts.Prefix]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	if len(ws) == 0 {
		delete(c.groups, w.opts.Prefix)
	}
}

func (c *Cache) remove(w *Watcher) {
	c.mu.Lock()
	c.removeLocked(w)
	c.mu.Unlock()
}

func (c *Cache) cutLocked(w *Watcher, err error) {
	c.removeLocked(w)
	w.cancel(err)
}

// tooOld builds the error for a watch from rev, with the oldest
// resourceVersion a watch could start from now.
func (c *Cache) tooOld(rev uint64) error {
	c.mu.RLock()
	oldest := c.start
	c.mu.RUnlock()
	return &TooOldError{Requested: rev, Oldest: max(oldest, c.f.CompactedRevision())}
}

// bookmarkDelay is the time to a watcher's next bookmark: the interval, or
// two seconds before the watch's deadline if that comes first, so a client
// whose watch times out still resumes from a recent revision (as
// kube-apiserver does).
func (c *Cache) bookmarkDelay(deadline time.Time, hasDeadline bool) time.Duration {
	d := c.cfg.BookmarkInterval
	if hasDeadline {
		if pre := deadline.Add(-2 * time.Second).Sub(c.cfg.Clock.Now()); pre > 0 && pre < d {
			d = pre
		}
	}
	return d
}

// Close ends every watcher with ErrClosed, unsubscribes from the fsm, and
// returns once every watcher goroutine has exited, so nothing outlives the
// node's shutdown. It is idempotent.
func (c *Cache) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.running.Wait()
		return
	}
	c.closed = true
	var ws []*Watcher
	for p, g := range c.groups {
		for w := range g {
			ws = append(ws, w)
		}
		delete(c.groups, p)
	}
	c.items, c.head = nil, 0
	c.mu.Unlock()
	c.cancelSub()
	for _, w := range ws {
		w.cancel(ErrClosed)
	}
	c.running.Wait()
}

// Range returns the window's bounds: a watch can start after any revision
// from oldest on, and progress is the applied index the cache has seen.
// For metrics and for the api's "too old" answers outside a watch.
func (c *Cache) Range() (oldest, progress uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.start, c.progress
}

// Len is the number of events held, for metrics.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items) - c.head
}
