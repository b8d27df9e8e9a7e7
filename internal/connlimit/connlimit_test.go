package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustplane/trustplane/internal/testlog"
)

// fakeClock runs timers only when Step moves time past them, on the
// caller's goroutine, in due order, with the clock set to each timer's
// due time while it runs.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Step advances the clock by d, firing every timer that falls due.
func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for range 100000 {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.done && !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		next.done = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
	panic("fakeClock: timers keep rescheduling themselves")
}

// fakeConn is a connection from a chosen address whose reads return the
// bytes given to it, and which records being closed.
type fakeConn struct {
	remote net.Addr
	mu     sync.Mutex
	data   []byte
	closed atomic.Bool
}

func newFakeConn(ip string) *fakeConn {
	return &fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

func (c *fakeConn) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *fakeConn) send(b string) {
	c.mu.Lock()
	c.data = append(c.data, b...)
	c.mu.Unlock()
}

func (c *fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fakeConn) Close() error                     { c.closed.Store(true); return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6443} }
func (c *fakeConn) RemoteAddr() net.Addr             { return c.remote }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// counts is the limiter's drop counters as "reason=n" for the non-zero ones.
func counts(l *Limiter) string {
	var out []string
	for _, r := range Reasons() {
		if n := l.Dropped(r); n > 0 {
			out = append(out, fmt.Sprintf("%s=%d", r, n))
		}
	}
	return strings.Join(out, " ")
}

// TestTable drives the pending table with steps: "o <ip>" opens a
// connection from ip (numbered from 0 in order), "e <i>" establishes
// connection i, "c <i>" closes it, "r <i>" rejects it.
func TestTable(t *testing.T) {
	cases := []struct {
		name      string
		max, per  int
		steps     []string
		wantShut  []int // connections the limiter closed
		wantCount string
		pending   int
	}{
		{
			name: "a full table drops its oldest connection, never the newest",
			max:  3, per: 3,
			steps:    []string{"o 10.0.0.1", "o 10.0.0.2", "o 10.0.0.3", "o 10.0.0.4", "o 10.0.0.5"},
			wantShut: []int{0, 1}, wantCount: "evicted=2", pending: 3,
		},
		{
			name: "a source at its share loses its own oldest, never another source's",
			max:  4, per: 2,
			steps:    []string{"o 10.0.0.9", "o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.1"},
			wantShut: []int{1, 2}, wantCount: "source_share=2", pending: 3,
		},
		{
			name: "one source alone can never fill the table",
			max:  8, per: 2,
			steps:    []string{"o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.1", "o 10.0.0.2"},
			wantShut: []int{0, 1, 2, 3}, wantCount: "source_share=4", pending: 3,
		},
		{
			name: "established connections leave the table and are never dropped",
			max:  2, per: 2,
			steps:    []string{"o 10.0.0.1", "e 0", "o 10.0.0.2", "o 10.0.0.3", "o 10.0.0.4"},
			wantShut: []int{1}, wantCount: "evicted=1", pending: 2,
		},
		{
			name: "a closed connection frees its slot, uncounted",
			max:  2, per: 2,
			steps:    []string{"o 10.0.0.1", "o 10.0.0.2", "c 0", "o 10.0.0.3"},
			wantShut: []int{0}, wantCount: "", pending: 2,
		},
		{
			name: "a rejected connection is counted once, an already dropped one not again",
			max:  1, per: 1,
			steps:    []string{"o 10.0.0.1", "o 10.0.0.2", "r 0", "r 1"},
			wantShut: []int{0, 1}, wantCount: "evicted=1 rejected=1", pending: 0,
		},
		{
			name: "an IPv6 /64 is one source; IPv4-mapped addresses are IPv4",
			max:  8, per: 1,
			steps:    []string{"o 2001:db8::1", "o 2001:db8::2", "o ::ffff:10.0.0.1", "o 10.0.0.1", "o 2001:db8:0:1::1"},
			wantShut: []int{0, 2}, wantCount: "source_share=2", pending: 3,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			l, err := New(Config{Name: "test", Max: tc.max, PerSource: tc.per, FirstByteTimeout: time.Second, Timeout: 10 * time.Second, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			var raw []*fakeConn
			var conns []*Conn
			for _, s := range tc.steps {
				op, arg, _ := strings.Cut(s, " ")
				var i int
				if op != "o" {
					fmt.Sscan(arg, &i)
				}
				switch op {
				case "o":
					fc := newFakeConn(arg)
					raw = append(raw, fc)
					conns = append(conns, l.Track(fc))
				case "e":
					conns[i].Established()
				case "c":
					conns[i].Close()
				case "r":
					conns[i].Reject(errors.New("not our protocol"))
				}
			}
			var shut []int
			for i, fc := range raw {
				if fc.closed.Load() {
					shut = append(shut, i)
				}
			}
			if !slices.Equal(shut, tc.wantShut) {
				t.Errorf("closed connections %v, want %v", shut, tc.wantShut)
			}
			if got := counts(l); got != tc.wantCount {
				t.Errorf("drops %q, want %q", got, tc.wantCount)
			}
			if got := l.Pending(); got != tc.pending {
				t.Errorf("pending %d, want %d", got, tc.pending)
			}
		})
	}
}

// TestDeadlines: the first-byte deadline, then the rest of Timeout.
func TestDeadlines(t *testing.T) {
	const first, total = 2 * time.Second, 10 * time.Second
	cases := []struct {
		name      string
		first     time.Duration
		send      bool // the first byte arrives at once
		establish bool // the owner establishes it at once
		openAt    time.Duration
		closedAt  time.Duration // 0: never (checked at an hour)
		want      string
	}{
		{"a silent connection is closed at the first-byte deadline", first, false, false, first - time.Millisecond, first, "first_byte_timeout=1"},
		{"a connection that sent its first byte has the rest of Timeout", first, true, false, total - time.Millisecond, total, "timeout=1"},
		{"an established connection has no deadline", first, true, true, time.Hour, 0, ""},
		{"without a first-byte deadline, Timeout alone applies", 0, false, false, total - time.Millisecond, total, "timeout=1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			l, err := New(Config{Name: "test", Max: 4, FirstByteTimeout: tc.first, Timeout: total, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			fc := newFakeConn("10.0.0.1")
			c := l.Track(fc)
			if tc.send {
				fc.send("x")
				if n, err := c.Read(make([]byte, 4)); n != 1 || err != nil {
					t.Fatalf("read %d %v", n, err)
				}
			}
			if tc.establish && !c.Established() {
				t.Fatal("Established reported the connection not pending")
			}
			clk.Step(tc.openAt)
			if fc.closed.Load() {
				t.Fatalf("closed before %v", tc.openAt)
			}
			if tc.closedAt == 0 {
				clk.Step(time.Hour)
				if fc.closed.Load() {
					t.Fatal("an established connection was closed")
				}
			} else {
				clk.Step(tc.closedAt - tc.openAt)
				if !fc.closed.Load() {
					t.Fatalf("still open at %v", tc.closedAt)
				}
			}
			if got := counts(l); got != tc.want {
				t.Errorf("drops %q, want %q", got, tc.want)
			}
			if l.Pending() != 0 && tc.closedAt != 0 {
				t.Errorf("pending %d after the drop", l.Pending())
			}
		})
	}
}

// TestLogIsRateLimited: a flood writes its first drop at once, then one
// line per interval with the counts since the last line, and nothing once
// the drops stop.
func TestLogIsRateLimited(t *testing.T) {
	const every = 10 * time.Second
	cases := []struct {
		name string
		// bursts of connections opened at offsets from the start; with
		// a table of one, each evicts the one before it, so the very
		// first connection is the one that is not a drop
		bursts []struct {
			at time.Duration
			n  int
		}
		end       time.Duration
		wantLines []string // the counts of each line
	}{
		{
			name: "one burst: the first drop at once, the rest at the end of the interval",
			bursts: []struct {
				at time.Duration
				n  int
			}{{0, 1000}},
			end:       time.Minute,
			wantLines: []string{"evicted=1", "evicted=998"},
		},
		{
			name: "a steady flood: one line per interval",
			bursts: []struct {
				at time.Duration
				n  int
			}{{0, 10}, {3 * time.Second, 10}, {12 * time.Second, 10}, {25 * time.Second, 10}},
			end:       time.Minute,
			wantLines: []string{"evicted=1", "evicted=18", "evicted=10", "evicted=10"},
		},
		{
			name: "drops far apart each get their own line at once",
			bursts: []struct {
				at time.Duration
				n  int
			}{{0, 2}, {30 * time.Second, 1}},
			end:       time.Minute,
			wantLines: []string{"evicted=1", "evicted=1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			var logs testlog.Buffer
			log := logs.Logger()
			l, err := New(Config{Name: "api", Max: 1, PerSource: 1, Timeout: time.Hour, LogEvery: every, Logger: log, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Duration(0)
			ip := 0
			for _, b := range tc.bursts {
				clk.Step(b.at - now)
				now = b.at
				for range b.n {
					ip++
					l.Track(newFakeConn(fmt.Sprintf("10.0.%d.%d", ip/250, ip%250+1)))
				}
			}
			clk.Step(tc.end - now)
			out := logs.String()
			lines := strings.Split(strings.TrimSpace(out), "\n")
			re := regexp.MustCompile(`evicted=\d+`)
			var got []string
			for _, line := range lines {
				if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "listener=api") {
					t.Fatalf("summary line not at warn level for the listener: %s", line)
				}
				got = append(got, re.FindString(line))
			}
			if !slices.Equal(got, tc.wantLines) {
				t.Fatalf("summary lines %q, want %q:\n%s", got, tc.wantLines, out)
			}
		})
	}
}

// TestListenerEvictsOverTCP: over real loopback sockets, a full table
// closes its oldest connection when a new one is accepted. (All come from
// 127.0.0.1, whose share is the whole table here, so the drop counts as
// the source's.)
func TestListenerEvictsOverTCP(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Name: "test", Max: 2, PerSource: 2, Timeout: time.Hour, Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listener(inner)
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for range 3 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		// Accept in dial order, so "oldest" is well defined.
		select {
		case sc := <-accepted:
			defer sc.Close()
		case <-time.After(10 * time.Second):
			t.Fatal("not accepted within 10s")
		}
	}
	_ = clients[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := clients[0].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the oldest connection: read error %v, want EOF (closed by the server)", err)
	}
	if got := counts(l); got != "source_share=1" {
		t.Fatalf("drops %q", got)
	}
}

// TestEstablishedUnwraps: Established finds the tracked connection under
// wrappers that expose NetConn (as *tls.Conn does).
func TestEstablishedUnwraps(t *testing.T) {
	l, err := New(Config{Name: "test", Max: 2, Timeout: time.Hour, Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	c := l.Track(newFakeConn("10.0.0.1"))
	if !Established(wrapped{wrapped{c}}) {
		t.Fatal("a wrapped pending connection was not found")
	}
	if l.Pending() != 0 || Established(wrapped{c}) || Established(newFakeConn("10.0.0.2")) {
		t.Fatal("established twice, or an untracked connection reported pending")
	}
}

type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// TestCollector: two collectors over different limiters share a registry,
// and report every reason of each.
func TestCollector(t *testing.T) {
	clk := newFakeClock()
	a, _ := New(Config{Name: "api", Max: 1, Timeout: time.Hour, Clock: clk})
	r, _ := New(Config{Name: "raft", Max: 1, Timeout: time.Hour, Clock: clk})
	a.Track(newFakeConn("10.0.0.1"))
	a.Track(newFakeConn("10.0.0.2"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(func() []*Limiter { return []*Limiter{a} }))
	reg.MustRegister(Collector(func() []*Limiter { return []*Limiter{r, nil} }))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			if m.GetCounter() != nil {
				got[key] = m.GetCounter().GetValue()
			} else {
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{
		"trustplane_connections_dropped_total,listener=api,reason=evicted":  1,
		"trustplane_connections_dropped_total,listener=raft,reason=evicted": 0,
		"trustplane_connections_dropped_total,listener=api,reason=rejected": 0,
		"trustplane_connections_pending,listener=api":                       1,
		"trustplane_connections_pending,listener=raft":                      0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if n := len(got); n != 2*(len(Reasons())+1) {
		t.Errorf("%d series, want %d", n, 2*(len(Reasons())+1))
	}
}

// TestConcurrentUse: many goroutines tracking, establishing, closing and
// rejecting at once (run with -race) never leave more than Max pending,
// and leave none once every connection is closed.
func TestConcurrentUse(t *testing.T) {
	l, err := New(Config{Name: "test", Max: 16, FirstByteTimeout: time.Millisecond, Timeout: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var over atomic.Bool
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				fc := newFakeConn(fmt.Sprintf("10.0.%d.%d", g, i%5+1))
				c := l.Track(fc)
				if l.Pending() > 16 {
					over.Store(true)
				}
				switch i % 4 {
				case 0:
					c.Established()
					c.Close()
				case 1:
					c.Reject(errors.New("refused"))
				case 2:
					c.Close()
				default:
					fc.send("x")
					_, _ = c.Read(make([]byte, 1))
					c.Close()
				}
			}
		}()
	}
	wg.Wait()
	if over.Load() {
		t.Fatal("more than Max pending at once")
	}
	if n := l.Pending(); n != 0 {
		t.Fatalf("%d pending after every connection closed", n)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Max: 0, Timeout: time.Second},
		{Max: 1, Timeout: 0},
		{Max: 1, Timeout: time.Second, PerSource: -1},
		{Max: 1, Timeout: time.Second, FirstByteTimeout: -1},
	} {
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	l, err := New(Config{Max: 4, PerSource: 9, Timeout: time.Second})
	if err != nil || l.PerSource() != 4 {
		t.Fatalf("PerSource above Max: %v, %d", err, l.PerSource())
	}
	for max, want := range map[int]int{1: 1, 8: 1, 16: 2, 32: 4, 128: 16, 1024: 128} {
		if got := DefaultPerSource(max); got != want {
			t.Errorf("DefaultPerSource(%d) = %d, want %d", max, got, want)
		}
	}
}
