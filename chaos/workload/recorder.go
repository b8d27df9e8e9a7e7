package workload

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

// Recorder collects a run's history from many goroutines. Its clock is
// the run's: nanoseconds since Start on the monotonic clock.
type Recorder struct {
	start time.Time
	id    atomic.Int64

	mu       sync.Mutex
	ops      []history.Op
	events   []history.Event
	sessions []history.Session

	// Counters for the live progress line.
	OK, Failed, Unknown, Events atomic.Int64
}

// NewRecorder starts the run's clock.
func NewRecorder(start time.Time) *Recorder { return &Recorder{start: start} }

// Now is the run's clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Start is when the run began.
func (r *Recorder) Start() time.Time { return r.start }

func (r *Recorder) op(o history.Op) {
	o.ID = r.id.Add(1)
	switch o.Outcome {
	case history.OK:
		r.OK.Add(1)
	case history.Fail:
		r.Failed.Add(1)
	default:
		r.Unknown.Add(1)
	}
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

func (r *Recorder) event(e history.Event) {
	r.Events.Add(1)
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *Recorder) session(s history.Session) {
	r.mu.Lock()
	r.sessions = append(r.sessions, s)
	r.mu.Unlock()
}

// Fill copies what was recorded into h.
func (r *Recorder) Fill(h *history.History) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.Started = r.start
	h.Ops = append([]history.Op(nil), r.ops...)
	h.Events = append([]history.Event(nil), r.events...)
	h.Sessions = append([]history.Session(nil), r.sessions...)
}
