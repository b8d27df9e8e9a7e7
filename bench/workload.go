package bench

import (
	"context"
	"sync"
	"time"
)

// errorPause is how long a client waits after a failed operation before
// the next, so that an instantly failing server does not turn a client
// into a busy loop.
const errorPause = 10 * time.Millisecond

// workload is one named load.
type workload struct {
	name string
	// detail says what one operation is, for the report.
	detail func(Config) string
	// prepare readies what the operations need (fixtures, watches) before
	// the clock starts; the runner bounds it with SetupTimeout.
	prepare func(ctx context.Context, e *env) (load, error)
}

// load is a prepared workload's timed phase.
type load interface {
	// run drives operations until deadline, recording each in rec, and
	// returns once its last operation has ended: each operation is bounded
	// by the request timeout, so run ends at most that long after
	// deadline. A cancelled ctx ends it early.
	run(ctx context.Context, deadline time.Time, rec *recorder)
}

// opFunc is one operation of client number client; seq counts that
// client's operations from 0. Its error is the operation's outcome.
type opFunc func(ctx context.Context, client, seq int) error

// closedLoop runs op on every client back to back: a client starts its
// next operation when the last has ended.
type closedLoop struct {
	e  *env
	op opFunc
}

func (c closedLoop) run(ctx context.Context, deadline time.Time, rec *recorder) {
	var wg sync.WaitGroup
	for client := range c.e.cfg.Clients {
		wg.Go(func() {
			for seq := 0; ctx.Err() == nil && time.Now().Before(deadline); seq++ {
				octx, cancel := context.WithTimeout(ctx, c.e.cfg.RequestTimeout)
				start := time.Now()
				err := c.op(octx, client, seq)
				took := time.Since(start)
				cancel()
				if err != nil {
					rec.failure(err)
					time.Sleep(errorPause)
					continue
				}
				rec.success(took)
			}
		})
	}
	wg.Wait()
}

// workloads is every workload in the order a full run takes them.
var workloads = []*workload{
	createWorkload, applyWorkload, updateWorkload, patchWorkload, getWorkload, getRV0Workload, listWorkload, listPagedWorkload,
	watchWorkload, tokenReviewWorkload, csrWorkload, mixedWorkload,
}

// WorkloadNames lists every workload, in run order.
func WorkloadNames() []string {
	out := make([]string, len(workloads))
	for i, w := range workloads {
		out[i] = w.name
	}
	return out
}

func lookup(name string) *workload {
	for _, w := range workloads {
		if w.name == name {
			return w
		}
	}
	return nil
}
