package fsm

import (
	"container/heap"
	"sync"
	"sync/atomic"
)

// indexWaiter lets many goroutines wait for the applied index to reach a
// value, in the style of etcd's pkg/wait.WaitTime: one channel per distinct
// awaited index, closed when trigger passes it. trigger costs O(k log n) for
// the k indexes it releases and never blocks, so apply is never slowed by
// the number of waiters. A waiter that gives up releases its slot, so
// clients asking for far-future indexes cannot make it grow without bound.
type indexWaiter struct {
	last atomic.Uint64 // highest index triggered; read without mu on the fast path

	mu    sync.Mutex
	slots map[uint64]*waitSlot
	order slotHeap // the values of slots, smallest index first
}

// waitSlot is the channel for one awaited index, shared by all its waiters.
type waitSlot struct {
	index uint64
	ch    chan struct{}
	refs  int // waiters that have not given up
	pos   int // position in order; -1 once released or abandoned
}

// closedCh is returned for indexes that have already been reached.
var closedCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func noop() {}

func newIndexWaiter() *indexWaiter {
	return &indexWaiter{slots: make(map[uint64]*waitSlot)}
}

// wait returns a channel that is closed once trigger has been called with
// an index >= idx, and a func to call if the caller stops waiting before
// that (calling it after the channel closed is harmless).
func (w *indexWaiter) wait(idx uint64) (<-chan struct{}, func()) {
	if idx <= w.last.Load() {
		return closedCh, noop
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if idx <= w.last.Load() {
		return closedCh, noop
	}
	s, ok := w.slots[idx]
	if !ok {
		s = &waitSlot{index: idx, ch: make(chan struct{})}
		w.slots[idx] = s
		heap.Push(&w.order, s)
	}
	s.refs++
	var once sync.Once
	return s.ch, func() { once.Do(func() { w.abandon(s) }) }
}

func (w *indexWaiter) abandon(s *waitSlot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.refs--
	if s.refs == 0 && s.pos >= 0 {
		heap.Remove(&w.order, s.pos)
		delete(w.slots, s.index)
	}
}

// trigger releases every waiter for an index <= idx. The triggered index
// never moves backwards.
func (w *indexWaiter) trigger(idx uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if idx <= w.last.Load() {
		return
	}
	w.last.Store(idx)
	for len(w.order) > 0 && w.order[0].index <= idx {
		s := heap.Pop(&w.order).(*waitSlot)
		close(s.ch)
		delete(w.slots, s.index)
	}
}

type slotHeap []*waitSlot

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i].index < h[j].index }
func (h slotHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *slotHeap) Push(x any) {
	s := x.(*waitSlot)
	s.pos = len(*h)
	*h = append(*h, s)
}
func (h *slotHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	s.pos = -1
	*h = old[:len(old)-1]
	return s
}
