package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedLoop checks the loop every closed-loop workload runs on: every
// client runs, every operation is recorded as a success or a failure, and
// the loop stops by itself at the deadline or when its context ends.
func TestClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
	}{
		{"stops at the deadline", false},
		{"stops when the context ends", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Clients, cfg.RequestTimeout = 4, time.Second
			e := &env{cfg: cfg}
			var calls atomic.Int64
			var clients [4]atomic.Int64
			errOdd := errors.New("odd")
			loop := closedLoop{e, func(ctx context.Context, client, seq int) error {
				calls.Add(1)
				clients[client].Add(1)
				if seq%2 == 1 {
					return errOdd
				}
				return nil
			}}
			ctx, cancel := context.WithCancel(context.Background())
			deadline := time.Now().Add(200 * time.Millisecond)
			if tc.cancel {
				deadline = time.Now().Add(time.Hour)
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			defer cancel()
			rec := newRecorder()
			loop.run(ctx, deadline, rec)
			ok, errs := rec.counts()
			if ok+errs != calls.Load() || ok == 0 || errs == 0 {
				t.Fatalf("%d calls, recorded %d ok and %d errors", calls.Load(), ok, errs)
			}
			for i := range clients {
				if clients[i].Load() == 0 {
					t.Errorf("client %d never ran", i)
				}
			}
			if got := rec.result("x", time.Second).ErrorSamples; len(got) != 1 || got[0] != "odd" {
				t.Errorf("error samples %q", got)
			}
		})
	}
}
