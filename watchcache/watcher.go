package watchcache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/trustplane/trustplane/fsm"
	"k8s.io/utils/clock"
)

// WatchOptions is one watch request, already translated from Kubernetes
// query parameters by the api.
type WatchOptions struct {
	// Prefix selects the resource, and optionally the namespace, watched.
	Prefix fsm.Prefix
	// Predicate is the label and field selector, evaluated on decoded
	// objects; nil selects everything (and then nothing is decoded for the
	// watcher's sake). An error ends the watch with that error.
	Predicate func(obj any) (bool, error)
	// StartRevision is the resourceVersion to start after. 0 means the
	// current applied index (with Initial: the current state, then every
	// change). A revision beyond the applied index is waited for.
	StartRevision uint64
	// Initial asks for a synthetic ADDED for every selected object live at
	// the start revision before the changes after it.
	Initial bool
	// Bookmarks asks for a BOOKMARK at the node's applied index about every
	// BookmarkInterval (and shortly before ctx's deadline), even when
	// nothing selected changed.
	Bookmarks bool
	// InitialEventsEnd asks for a BOOKMARK with InitialEventsEnd set right
	// after the initial events (sendInitialEvents=true). It needs Initial.
	InitialEventsEnd bool
}

// Watcher is one running watch. A goroutine per watcher reads the window
// from its position, filters, and sends to Events; the apply path never
// waits for it.
type Watcher struct {
	c      *Cache
	opts   WatchOptions
	ctx    context.Context
	cancel context.CancelCauseFunc
	out    chan Event
	notify chan struct{}
	exited chan struct{}
	timer  clock.Timer // nil unless opts.Bookmarks

	// pos: every change with a revision <= pos has been delivered (or is
	// being sent) or was not wanted. Written by the goroutine (only ever raised) and by
	// OnIndex (CAS, to move an idle watcher forward).
	pos atomic.Uint64
	// blocked is set while the goroutine waits for the client to read;
	// blockedAt is Cache.appended when it started waiting.
	blocked   atomic.Bool
	blockedAt atomic.Uint64

	// Initial state, set before the goroutine starts (or by it, when the
	// start revision is in the future).
	initial     []*fsm.KV
	initialRev  uint64
	waitInitial bool

	buf []*item
}

// errStopped is the cancel cause of Stop; Err reports it as nil.
var errStopped = errors.New("watchcache: watcher stopped")

// Watch starts a watch. Errors that can be known at once come back here:
// ErrTooOld (as *TooOldError) when the start revision is older than the
// window (or, with Initial, than the fsm's compacted revision), ErrClosed,
// ctx's error. Everything later ends the watcher and shows in Err.
//
// The watcher is registered at its start position before any history is
// read, and its goroutine reads the window from that position without
// holding the lock across the replay: no change between the replayed
// history and the live stream can be missed or delivered twice. Events
// arrive in revision order; initial ADDED events come in key order first.
// ctx bounds the watch: when it is done the watcher ends with ctx's error.
func (c *Cache) Watch(ctx context.Context, opts WatchOptions) (*Watcher, error) {
	if opts.InitialEventsEnd && !opts.Initial {
		return nil, errors.New("watchcache: InitialEventsEnd requires Initial")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	w := &Watcher{
		c:      c,
		opts:   opts,
		ctx:    wctx,
		cancel: cancel,
		out:    make(chan Event, min(c.cfg.WatcherBuffer, maxOutBuffer)),
		notify: make(chan struct{}, 1),
		exited: make(chan struct{}),
	}
	now := c.now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	c.trimLocked(now)
	start := opts.StartRevision
	if start == 0 {
		start = c.progress
	} else if start < c.start {
		oldest := c.start
		c.mu.Unlock()
		cancel(ErrTooOld)
		return nil, &TooOldError{Requested: start, Oldest: oldest}
	}
	w.pos.Store(start)
	c.addLocked(w)
	c.running.Add(1)
	applied := c.progress
	c.mu.Unlock()

	if opts.Initial {
		if opts.StartRevision <= applied {
			res, err := c.f.List(opts.Prefix, fsm.ListOptions{Revision: opts.StartRevision})
			if err != nil {
				c.remove(w)
				c.running.Done()
				err = c.listErr(opts.StartRevision, err)
				cancel(err)
				return nil, err
			}
			w.initial, w.initialRev = res.KVs, res.Revision
			w.advance(res.Revision)
		} else {
			w.waitInitial = true
		}
	}
	if opts.Bookmarks {
		dl, ok := ctx.Deadline()
		w.timer = c.cfg.Clock.NewTimer(c.bookmarkDelay(dl, ok))
	}
	go w.run()
	return w, nil
}

func (c *Cache) listErr(rev uint64, err error) error {
	if errors.Is(err, fsm.ErrCompacted) {
		return c.tooOld(rev)
	}
	return fmt.Errorf("watchcache: initial state at %d: %w", rev, err)
}

// Events is the watch stream. It is closed when the watcher ends (Err says
// why); events already in it can still be read, so the last one received
// is the revision to resume from.
func (w *Watcher) Events() <-chan Event { return w.out }

// Stop ends the watch and returns once its goroutine has exited, so a
// caller that stops a watcher holds no goroutine afterwards. Idempotent;
// the client need not drain Events first.
func (w *Watcher) Stop() {
	w.cancel(errStopped)
	<-w.exited
}

// Err says why the watcher ended, once Events is closed: ErrSlowWatcher,
// a *TooOldError, ErrClosed, ctx's error, or a Predicate or Decode error;
// nil if it was stopped with Stop or has not ended.
func (w *Watcher) Err() error {
	if w.ctx.Err() == nil {
		return nil
	}
	err := context.Cause(w.ctx)
	if errors.Is(err, errStopped) {
		return nil
	}
	return err
}

// stalled is how many events were applied (appended is Cache.appended)
// since the watcher's client stopped reading; 0 if it is reading.
func (w *Watcher) stalled(appended uint64) uint64 {
	if !w.blocked.Load() {
		return 0
	}
	return appended - min(appended, w.blockedAt.Load())
}

func (w *Watcher) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// advance raises pos to rev; it never lowers it, because OnIndex may have
// moved it ahead concurrently.
func (w *Watcher) advance(rev uint64) {
	for {
		cur := w.pos.Load()
		if rev <= cur || w.pos.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func (w *Watcher) run() {
	defer w.finish()
	if w.waitInitial {
		rev := w.opts.StartRevision
		if err := w.c.f.WaitApplied(w.ctx, rev); err != nil {
			return // ctx done; its cause says why
		}
		res, err := w.c.f.List(w.opts.Prefix, fsm.ListOptions{Revision: rev})
		if err != nil {
			w.cancel(w.c.listErr(rev, err))
			return
		}
		w.initial, w.initialRev = res.KVs, res.Revision
	}
	if w.opts.Initial {
		for i, kv := range w.initial {
			w.initial[i] = nil
			if !w.deliverInitial(kv) {
				return
			}
		}
		w.initial = nil
		if w.opts.InitialEventsEnd &&
			!w.send(Event{Type: Bookmark, Revision: w.initialRev, InitialEventsEnd: true}) {
			return
		}
	}

	var tick <-chan time.Time
	if w.timer != nil {
		tick = w.timer.C()
	}
	due := false
	for {
		select {
		case <-w.ctx.Done():
			return
		default:
		}
		items, progress, more, ok := w.c.read(w.pos.Load(), w.buf[:0])
		if !ok {
			w.cancel(ErrSlowWatcher)
			return
		}
		for _, it := range items {
			// pos moves before the send, so once the client has an event
			// the watcher's position is at least its revision (a Restore
			// right after must not see it behind). If the send fails the
			// watcher is ending anyway.
			w.advance(it.ev.Revision)
			if !w.deliver(it) {
				return
			}
		}
		clear(items)
		w.buf = items[:0]
		if more {
			continue
		}
		// Every change up to progress was in what was just read.
		w.advance(progress)
		if due {
			due = false
			// Only once caught up: a watcher waiting for a future
			// revision has nothing to report yet.
			if w.pos.Load() == progress && !w.send(Event{Type: Bookmark, Revision: progress}) {
				return
			}
			dl, hasDL := w.ctx.Deadline()
			w.timer.Reset(w.c.bookmarkDelay(dl, hasDL))
		}
		select {
		case <-w.notify:
		case <-tick:
			due = true
		case <-w.ctx.Done():
			return
		}
	}
}

func (w *Watcher) finish() {
	w.cancel(nil) // no-op if already ended; releases the context otherwise
	if errors.Is(context.Cause(w.ctx), ErrSlowWatcher) {
		w.c.slow.Add(1)
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.c.remove(w)
	close(w.out)
	close(w.exited)
	w.c.running.Done()
}

func (w *Watcher) deliverInitial(kv *fsm.KV) bool {
	if w.opts.Predicate != nil {
		ok, err := w.match(kv)
		if err != nil {
			return false
		}
		if !ok {
			return true
		}
	}
	return w.send(Event{Type: Added, Revision: kv.ModRevision, KV: kv, c: w.c})
}

// deliver turns one applied change into this watcher's event, if any. With
// a predicate, an update is MODIFIED if the object matched before and
// after, ADDED if it starts matching, and DELETED (showing the previous
// version) if it stops; kube-apiserver's cacher does the same.
func (w *Watcher) deliver(it *item) bool {
	ev := &it.ev
	k, p := ev.KV.Key, w.opts.Prefix
	if k.Resource != p.Resource || k.Group != p.Group || k.Space != p.Space || (p.Namespace != "" && k.Namespace != p.Namespace) {
		return true
	}
	out := Event{Revision: ev.Revision, KV: ev.KV, Prev: ev.Prev, c: w.c}
	if w.opts.Predicate == nil {
		switch {
		case ev.Type == fsm.EventDelete:
			out.Type = Deleted
		case ev.Prev == nil:
			out.Type = Added
		default:
			out.Type = Modified
		}
		return w.send(out)
	}
	// A delete's KV has the deleted version's content: the predicate and
	// the api see the same decoded object.
	cur, err := w.match(ev.KV)
	if err != nil {
		return false
	}
	if ev.Type == fsm.EventDelete {
		if !cur {
			return true
		}
		out.Type = Deleted
		return w.send(out)
	}
	prev := false
	if ev.Prev != nil {
		if prev, err = w.match(ev.Prev); err != nil {
			return false
		}
	}
	switch {
	case cur && prev:
		out.Type = Modified
	case cur:
		out.Type = Added
	case prev:
		out.Type, out.KV = Deleted, ev.Prev
	default:
		return true
	}
	return w.send(out)
}

// match runs the predicate on kv decoded; an error ends the watcher.
func (w *Watcher) match(kv *fsm.KV) (bool, error) {
	obj, err := Event{KV: kv, c: w.c}.Object()
	if err != nil {
		err = fmt.Errorf("watchcache: decode %v at revision %d: %w", kv.Key, kv.ModRevision, err)
		w.cancel(err)
		return false, err
	}
	ok, err := w.opts.Predicate(obj)
	if err != nil {
		err = fmt.Errorf("watchcache: filter %v at revision %d: %w", kv.Key, kv.ModRevision, err)
		w.cancel(err)
		return false, err
	}
	return ok, nil
}

// send delivers ev, waiting for the client if it must. While it waits the
// watcher is marked blocked, which is what lets OnIndex cut it off once
// more than WatcherBuffer events have been applied meanwhile. A client
// that reads steadily while the watcher replays a long backlog is never
// blocked that long, so only a client that stopped reading is cut off.
func (w *Watcher) send(ev Event) bool {
	select {
	case w.out <- ev:
		return true
	default:
	}
	w.blockedAt.Store(w.c.appended.Load())
	w.blocked.Store(true)
	defer w.blocked.Store(false)
	select {
	case w.out <- ev:
		return true
	case <-w.ctx.Done():
		return false
	}
}
