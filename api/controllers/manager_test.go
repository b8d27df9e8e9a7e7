package controllers

import (
	"context"
	"errors"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flag is a Leadership the test switches.
type flag struct{ v atomic.Bool }

func (f *flag) IsLeader() bool { return f.v.Load() }

// recorder is a Runner that records its terms: how many run at once, and
// that each returns only when its context ends (or fails when told to).
type recorder struct {
	mu      sync.Mutex
	live    int
	maxLive int
	started int
	stopped int
	labels  []string
	fail    atomic.Bool
}

var errStart = errors.New("cannot start")

func (r *recorder) Run(ctx context.Context) error {
	r.mu.Lock()
	r.started++
	label, _ := pprof.Label(ctx, ProfileLabel)
	r.labels = append(r.labels, label)
	r.live++
	if r.live > r.maxLive {
		r.maxLive = r.live
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.live--
		r.stopped++
		r.mu.Unlock()
	}()
	if r.fail.Load() {
		return errStart
	}
	<-ctx.Done()
	return nil
}

func (r *recorder) counts() (started, stopped, live, maxLive int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started, r.stopped, r.live, r.maxLive
}

// eventually polls cond (bounded) and fails the test with what if it never holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newManager(t *testing.T, lead Leadership, run Runner) *Manager {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Leadership, cfg.Runner = lead, run
	cfg.PollInterval = time.Millisecond
	cfg.RetryInterval = 20 * time.Millisecond
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestManagerRunsOneTermPerLeadership(t *testing.T) {
	lead, rec := &flag{}, &recorder{}
	m := newManager(t, lead, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()

	// A follower runs nothing.
	time.Sleep(20 * time.Millisecond)
	if s, _, _, _ := rec.counts(); s != 0 || m.Running() {
		t.Fatalf("a follower started %d terms (running %v)", s, m.Running())
	}

	for term := 1; term <= 3; term++ {
		lead.v.Store(true)
		eventually(t, "a term starts on becoming leader", func() bool { s, _, l, _ := rec.counts(); return s == term && l == 1 })
		if !m.Running() || m.Terms() != int64(term) {
			t.Fatalf("term %d: Running %v, Terms %d", term, m.Running(), m.Terms())
		}
		lead.v.Store(false)
		eventually(t, "the term ends on losing leadership", func() bool { _, st, l, _ := rec.counts(); return st == term && l == 0 })
		eventually(t, "Running turns false", func() bool { return !m.Running() })
	}

	lead.v.Store(true)
	eventually(t, "a fourth term starts", func() bool { s, _, l, _ := rec.counts(); return s == 4 && l == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	// Run returned only after the running term had stopped.
	if s, st, l, maxLive := rec.counts(); s != 4 || st != 4 || l != 0 || maxLive != 1 {
		t.Fatalf("started %d, stopped %d, live %d, at most %d at once; want 4, 4, 0, 1", s, st, l, maxLive)
	}
	// Each term runs under its own profile label.
	if want := []string{"1", "2", "3", "4"}; !slices.Equal(rec.labels, want) {
		t.Fatalf("terms ran with %s labels %q, want %q", ProfileLabel, rec.labels, want)
	}
}

func TestManagerRetriesAFailedTermWhileLeading(t *testing.T) {
	lead, rec := &flag{}, &recorder{}
	rec.fail.Store(true)
	lead.v.Store(true)
	m := newManager(t, lead, rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	eventually(t, "a failed term is retried", func() bool { s, _, _, _ := rec.counts(); return s >= 2 })
	rec.fail.Store(false)
	eventually(t, "a retried term keeps running", func() bool { _, _, l, _ := rec.counts(); return l == 1 && m.Running() })
	if _, _, _, maxLive := rec.counts(); maxLive != 1 {
		t.Fatalf("%d terms ran at once", maxLive)
	}
}

func TestValidateConfig(t *testing.T) {
	good := func() *Config {
		c := DefaultConfig()
		c.Leadership, c.Runner = &flag{}, &recorder{}
		return c
	}
	cases := map[string]func(*Config){
		"leadership is required":         func(c *Config) { c.Leadership = nil },
		"runner is required":             func(c *Config) { c.Runner = nil },
		"poll interval must be positive": func(c *Config) { c.PollInterval = 0 },
		"retry interval not negative":    func(c *Config) { c.RetryInterval = -time.Second },
	}
	if err := ValidateConfig(good()); err != nil {
		t.Fatalf("default config with leadership and runner: %v", err)
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			c := good()
			breakIt(c)
			if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := NewKube(DefaultKubeConfig()); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewKube without host, CA and issuer: %v, want ErrInvalidConfig", err)
	}
}

// Restart ends the running term and starts the next at once; one term at
// a time still; without a term it does nothing.
func TestManagerRestart(t *testing.T) {
	var lead flag
	r := &recorder{}
	m := newManager(t, &lead, r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	m.Restart("no term yet")
	lead.v.Store(true)
	eventually(t, "the first term", func() bool { s, _, live, _ := r.counts(); return s == 1 && live == 1 })
	m.Restart("the cluster CAs changed")
	eventually(t, "a second term after the restart", func() bool { s, st, live, _ := r.counts(); return s == 2 && st == 1 && live == 1 })
	if _, _, _, maxLive := r.counts(); maxLive != 1 {
		t.Fatalf("%d terms ran at once", maxLive)
	}
	if m.Terms() != 2 {
		t.Fatalf("%d terms, want 2", m.Terms())
	}
}
