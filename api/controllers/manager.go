package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"
)

// Sentinel errors of this package.
var (
	// ErrInvalidConfig is a Config or KubeConfig that cannot work.
	ErrInvalidConfig = errors.New("controllers: invalid configuration")
	// errTermEnded refuses a connection a controller dials after its term
	// ended.
	errTermEnded = errors.New("controllers: the leadership term has ended")
)

// ProfileLabel is the pprof label every goroutine of a term carries (the
// value is the term's number), so that /debug/pprof/goroutine?debug=1
// shows what a term runs and that nothing outlives it.
const ProfileLabel = "trustplane-controllers-term"

// WorkLabel is the pprof label naming the work a term runs (Config.Name):
// a node may run terms of two Managers at once (the controllers, the
// expiry of events).
const WorkLabel = "trustplane-term-work"

// Leadership is what the Manager needs from the cluster: raft's
// leadership (cluster.Node) for the expiry of events, the controllers'
// lease (Host) for the controllers.
type Leadership interface {
	// IsLeader reports whether this node may run the work right now.
	// The Manager polls it, and a false ends the term, so it must turn
	// false soon after the node lost the right. A briefly stale true is
	// tolerable: writes through a node that lost it fail, or reach the
	// log like any client's, and kube's controllers write optimistically
	// (create, or update at a resourceVersion), so two overlapping terms
	// cannot corrupt anything.
	IsLeader() bool
}

// Runner is one leadership term's work.
type Runner interface {
	// Run runs the controllers until ctx ends. It must not return before
	// every goroutine it started has stopped, so that a new term (on this
	// node, after it leads again) starts from nothing and goroutines never
	// pile up across terms. An error returned before ctx ends means the
	// term could not start; the Manager tries again after RetryInterval
	// while the node still leads.
	Run(ctx context.Context) error
}

// Config configures a Manager.
type Config struct {
	// Leadership says when to run.
	Leadership Leadership
	// Runner is started for each term.
	Runner Runner
	// PollInterval is how often leadership is checked: the longest a term
	// keeps running after the node stopped leading, and the longest a new
	// leader waits before starting one.
	PollInterval time.Duration
	// RetryInterval is how long to wait before starting a term again after
	// the Runner failed.
	RetryInterval time.Duration
	// Logger receives term starts, stops and failures; nil means
	// slog.Default().
	Logger *slog.Logger
	// Name is what the log calls the Runner's work; "" means
	// "controllers". The same Manager runs other leader-only work (the
	// expiry of events) in terms of its own.
	Name string
	// Holds is what the log says Leadership's true means; "" means
	// "this node leads".
	Holds string
}

// DefaultConfig returns a Config with the default intervals; Leadership
// and Runner must still be set.
func DefaultConfig() *Config {
	return &Config{PollInterval: 250 * time.Millisecond, RetryInterval: 5 * time.Second}
}

// ValidateConfig reports what makes c unusable.
func ValidateConfig(c *Config) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: no config", ErrInvalidConfig)
	case c.Leadership == nil:
		return fmt.Errorf("%w: no Leadership", ErrInvalidConfig)
	case c.Runner == nil:
		return fmt.Errorf("%w: no Runner", ErrInvalidConfig)
	case c.PollInterval <= 0:
		return fmt.Errorf("%w: PollInterval %s must be positive", ErrInvalidConfig, c.PollInterval)
	case c.RetryInterval < 0:
		return fmt.Errorf("%w: RetryInterval %s must not be negative", ErrInvalidConfig, c.RetryInterval)
	}
	return nil
}

// Manager runs a Runner while Leadership says so: it starts a term when
// it turns true and ends it (cancel, then wait) when it turns false or the
// Manager's context ends. At most one term runs at a time.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	running atomic.Bool
	terms   atomic.Int64
	restart chan string
}

// New returns a Manager for cfg.
func New(cfg *Config) (*Manager, error) {
	if err := ValidateConfig(cfg); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{cfg: *cfg, log: log, restart: make(chan string, 1)}
	if m.cfg.Name == "" {
		m.cfg.Name = "controllers"
	}
	if m.cfg.Holds == "" {
		m.cfg.Holds = "this node leads"
	}
	return m, nil
}

// Restart ends the running term and starts the next one at once, so that
// the Runner picks up what it reads at the start of a term (the cluster
// CAs after a rotation step); why is logged. Without a running term it
// does nothing: the next term reads the new state anyway.
func (m *Manager) Restart(why string) {
	if !m.running.Load() {
		return
	}
	select {
	case m.restart <- why:
	default:
	}
}

// Running reports whether a term is running now.
func (m *Manager) Running() bool { return m.running.Load() }

// Terms is how many terms have started so far.
func (m *Manager) Terms() int64 { return m.terms.Load() }

// term is one running Runner.
type term struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

func (m *Manager) start(ctx context.Context) *term {
	tctx, cancel := context.WithCancel(ctx)
	t := &term{cancel: cancel, done: make(chan struct{})}
	n := m.terms.Add(1)
	m.running.Store(true)
	m.log.Info("starting "+m.cfg.Name+": "+m.cfg.Holds, "term", n)
	go func() {
		defer close(t.done)
		// Goroutines inherit their creator's labels, so everything the
		// term starts carries this one.
		pprof.Do(tctx, pprof.Labels(ProfileLabel, strconv.FormatInt(n, 10), WorkLabel, m.cfg.Name), func(ctx context.Context) {
			t.err = m.cfg.Runner.Run(ctx)
		})
	}()
	return t
}

// stop ends t and waits until its Runner has returned.
func (m *Manager) stop(t *term, why string) {
	t.cancel()
	<-t.done
	m.running.Store(false)
	m.log.Info("stopped "+m.cfg.Name, "term", m.terms.Load(), "reason", why)
}

// Run drives terms until ctx ends, and returns once the last term has
// stopped.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.PollInterval)
	defer tick.Stop()
	var (
		cur        *term
		retryAfter time.Time
	)
	for {
		leading := m.cfg.Leadership.IsLeader()
		switch {
		case cur == nil && leading && !time.Now().Before(retryAfter):
			cur = m.start(ctx)
		case cur != nil && !leading:
			m.stop(cur, "no longer: "+m.cfg.Holds)
			cur = nil
		case cur != nil:
			select {
			case <-cur.done:
				// The Runner gave up while the node still leads.
				m.running.Store(false)
				m.log.Error(m.cfg.Name+" failed; retrying", "error", cur.err, "after", m.cfg.RetryInterval)
				retryAfter = time.Now().Add(m.cfg.RetryInterval)
				cur = nil
			default:
			}
		}
		select {
		case <-ctx.Done():
			if cur != nil {
				m.stop(cur, "shutting down")
			}
			return
		case why := <-m.restart:
			if cur != nil {
				m.stop(cur, why)
				cur = nil
			}
		case <-tick.C:
		}
	}
}
