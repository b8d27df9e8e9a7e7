package fsm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestWaitApplied(t *testing.T) {
	t.Run("already applied indexes return at once", func(t *testing.T) {
		h := newHarness(t)
		h.mustPut(pod("ns", "a"), "1")
		h.config()
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // even a done context: an applied index wins
		for _, idx := range []uint64{0, 1, 2} {
			if err := h.f.WaitApplied(ctx, idx); err != nil {
				t.Fatalf("WaitApplied(%d) = %v", idx, err)
			}
		}
		if err := h.f.WaitApplied(ctx, 3); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitApplied(3) on a cancelled context = %v", err)
		}
	})

	t.Run("returns when the index is reached", func(t *testing.T) {
		h := newHarness(t)
		const waiters = 50
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			idx := uint64(i%5 + 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := h.f.WaitApplied(t.Context(), idx)
				if err == nil && h.f.AppliedIndex() < idx {
					err = errors.New("released before the index was applied")
				}
				errs <- err
			}()
		}
		// Indexes 1..5 arrive as a command, a config entry, a no-op and a
		// batch; nothing waits for the waiters.
		h.mustPut(pod("ns", "a"), "1")
		h.config()
		h.apply(&Command{Op: OpNoop})
		h.f.ApplyBatch([]*raft.Log{
			cmdLog(4, &Command{Op: OpNoop}),
			{Index: 5, Type: raft.LogConfiguration},
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("returns the context error on cancel", func(t *testing.T) {
		f := New()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- f.WaitApplied(ctx, 10) }()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitApplied = %v, want context.Canceled", err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), time.Millisecond)
		defer cancel()
		if err := f.WaitApplied(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitApplied = %v, want DeadlineExceeded", err)
		}
	})

	t.Run("restore releases waiters", func(t *testing.T) {
		src := newHarness(t)
		for i := 0; i < 5; i++ {
			src.mustPut(pod("ns", "a"), "x")
		}
		snap := persist(t, src.f)
		f := New()
		done := make(chan error, 1)
		go func() { done <- f.WaitApplied(t.Context(), 4) }()
		if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestIndexWaiter(t *testing.T) {
	w := newIndexWaiter()
	chs := map[uint64]<-chan struct{}{}
	for _, i := range []uint64{5, 3, 9, 3, 7} {
		chs[i], _ = w.wait(i)
	}
	w.trigger(6)
	for i, ch := range chs {
		select {
		case <-ch:
			if i > 6 {
				t.Fatalf("waiter for %d released at 6", i)
			}
		default:
			if i <= 6 {
				t.Fatalf("waiter for %d not released at 6", i)
			}
		}
	}
	w.trigger(2) // never backwards
	if w.last.Load() != 6 || len(w.slots) != 2 || len(w.order) != 2 {
		t.Fatalf("last=%d slots=%d order=%d", w.last.Load(), len(w.slots), len(w.order))
	}

	// Abandoned slots are freed once their last waiter gives up; slots
	// that still have a waiter stay and are released normally.
	_, a1 := w.wait(100)
	_, a2 := w.wait(100)
	keep, _ := w.wait(50)
	_, b := w.wait(1 << 60)
	a1()
	a1() // idempotent
	if len(w.slots) != 5 {
		t.Fatalf("slot freed while a waiter remains: %d slots", len(w.slots))
	}
	a2()
	b()
	if len(w.slots) != 3 || len(w.order) != 3 {
		t.Fatalf("abandoned slots not freed: slots=%d order=%d", len(w.slots), len(w.order))
	}
	w.trigger(60)
	select {
	case <-keep:
	default:
		t.Fatal("waiter for 50 not released at 60")
	}
	w.trigger(200)
	if len(w.slots) != 0 || len(w.order) != 0 {
		t.Fatalf("slots=%d order=%d after releasing everything", len(w.slots), len(w.order))
	}
}

func TestWaitAppliedFreesCancelledWaiters(t *testing.T) {
	f := New()
	for i := uint64(1); i <= 100; i++ {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := f.WaitApplied(ctx, 1000+i); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	if n := len(f.waiter.slots); n != 0 {
		t.Fatalf("%d slots left behind by cancelled waiters", n)
	}
}
