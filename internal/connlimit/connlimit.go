package connlimit

import (
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidConfig wraps every Config.Validate error.
var ErrInvalidConfig = errors.New("connlimit: invalid config")

// DefaultLogEvery is the interval of the drop summary line when
// Config.LogEvery is zero.
const DefaultLogEvery = 10 * time.Second

// Reason says why a pending connection was dropped.
type Reason int

const (
	// Evicted: the table was full; the oldest pending connection made
	// room for a new one.
	Evicted Reason = iota
	// SourceShare: its source held its whole share; that source's oldest
	// pending connection made room for the source's new one.
	SourceShare
	// FirstByteTimeout: nothing arrived within FirstByteTimeout.
	FirstByteTimeout
	// Timeout: still pending after Timeout (a TLS handshake that did not
	// finish in time).
	Timeout
	// Rejected: the owner refused what the connection sent (Conn.Reject):
	// a failed TLS handshake, a declared length over its bound.
	Rejected

	numReasons
)

// String is the reason's label in logs and metrics.
func (r Reason) String() string {
	switch r {
	case Evicted:
		return "evicted"
	case SourceShare:
		return "source_share"
	case FirstByteTimeout:
		return "first_byte_timeout"
	case Timeout:
		return "timeout"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("reason%d", int(r))
}

// Reasons lists every Reason, in order.
func Reasons() []Reason {
	out := make([]Reason, 0, numReasons)
	for r := Reason(0); r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// Config configures one Limiter.
type Config struct {
	// Name labels the limiter's log lines and metrics ("api", "raft",
	// "gossip").
	Name string
	// Max is the size of the pending table.
	Max int
	// PerSource is how many slots one source may hold; 0 means
	// DefaultPerSource(Max). It is capped at Max.
	PerSource int
	// FirstByteTimeout is how long a connection has to send its first
	// byte; 0, or a value not below Timeout, leaves Timeout alone.
	FirstByteTimeout time.Duration
	// Timeout is how long a connection may stay pending in all.
	Timeout time.Duration
	// LogEvery spaces the drop summary lines; 0 means DefaultLogEvery.
	LogEvery time.Duration
	// Logger receives the summary lines; nil discards them.
	Logger *slog.Logger
	// Clock is the time source; nil is the real one.
	Clock Clock
}

// DefaultPerSource is the share of a table of size slots one source may
// hold when Config.PerSource is zero: an eighth, at least one. Eight
// sources are then needed to fill the table, and any one of them can
// push out only its own connections.
func DefaultPerSource(size int) int { return max(1, (size+7)/8) }

// Validate reports a configuration New cannot run with.
func (c *Config) Validate() error {
	switch {
	case c.Max <= 0:
		return fmt.Errorf("%w: %s: Max %d must be positive", ErrInvalidConfig, c.Name, c.Max)
	case c.Timeout <= 0:
		return fmt.Errorf("%w: %s: Timeout %s must be positive", ErrInvalidConfig, c.Name, c.Timeout)
	case c.PerSource < 0 || c.FirstByteTimeout < 0 || c.LogEvery < 0:
		return fmt.Errorf("%w: %s: PerSource, FirstByteTimeout and LogEvery must not be negative", ErrInvalidConfig, c.Name)
	}
	return nil
}

// Limiter is one listener's pending table. Its methods are safe for
// concurrent use.
type Limiter struct {
	name      string
	max       int
	perSource int
	firstByte time.Duration // 0: no separate first-byte deadline
	timeout   time.Duration
	logEvery  time.Duration
	log       *slog.Logger
	clock     Clock

	mu       sync.Mutex
	order    list.List             // pending *Conn, oldest first
	bySource map[string]*list.List // pending *Conn per source, oldest first

	dropped [numReasons]atomic.Uint64
	rep     reporter
}

// New returns a Limiter for cfg.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		name: cfg.Name, max: cfg.Max, perSource: cfg.PerSource, timeout: cfg.Timeout,
		logEvery: cfg.LogEvery, log: cfg.Logger, clock: cfg.Clock, bySource: map[string]*list.List{},
	}
	if l.perSource == 0 {
		l.perSource = DefaultPerSource(l.max)
	}
	l.perSource = min(l.perSource, l.max)
	if cfg.FirstByteTimeout > 0 && cfg.FirstByteTimeout < cfg.Timeout {
		l.firstByte = cfg.FirstByteTimeout
	}
	if l.logEvery == 0 {
		l.logEvery = DefaultLogEvery
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.clock == nil {
		l.clock = realClock{}
	}
	return l, nil
}

// Name is the limiter's Config.Name.
func (l *Limiter) Name() string { return l.name }

// PerSource is the share of the table one source may hold.
func (l *Limiter) PerSource() int { return l.perSource }

// Pending is the number of connections in the table now.
func (l *Limiter) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// Dropped is the number of connections dropped for r since New.
func (l *Limiter) Dropped(r Reason) uint64 {
	if r < 0 || r >= numReasons {
		return 0
	}
	return l.dropped[r].Load()
}

// Listener returns ln with every accepted connection tracked (Track).
// Accept never refuses a connection.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return ln.l.Track(c), nil
}

// Track puts nc into the table, making room first if its source holds
// its share (that source's oldest leaves) or the table is full (the
// oldest leaves), and starts its deadlines. The caller must use the
// returned Conn in place of nc, and call its Established once the
// connection has proved itself; Close and Reject take it out too.
func (l *Limiter) Track(nc net.Conn) *Conn {
	c := &Conn{Conn: nc, l: l, source: Source(nc.RemoteAddr())}
	var victim *Conn
	var reason Reason
	l.mu.Lock()
	if q := l.bySource[c.source]; q != nil && q.Len() >= l.perSource {
		victim, reason = q.Front().Value.(*Conn), SourceShare
	} else if l.order.Len() >= l.max {
		victim, reason = l.order.Front().Value.(*Conn), Evicted
	}
	if victim != nil {
		l.removeLocked(victim)
	}
	c.inOrder = l.order.PushBack(c)
	q := l.bySource[c.source]
	if q == nil {
		q = list.New()
		l.bySource[c.source] = q
	}
	c.inSource = q.PushBack(c)
	wait := l.timeout
	if l.firstByte > 0 {
		wait = l.firstByte
	} else {
		c.handshake = true
	}
	c.timer = l.clock.AfterFunc(wait, func() { l.expire(c) })
	l.mu.Unlock()
	if victim != nil {
		l.drop(victim, reason, nil)
	}
	return c
}

// removeLocked takes c out of the table and stops its timer; it reports
// whether c was in it. l.mu must be held.
func (l *Limiter) removeLocked(c *Conn) bool {
	if c.inOrder == nil {
		return false
	}
	l.order.Remove(c.inOrder)
	if q := l.bySource[c.source]; q != nil {
		q.Remove(c.inSource)
		if q.Len() == 0 {
			delete(l.bySource, c.source)
		}
	}
	c.inOrder, c.inSource = nil, nil
	if c.timer != nil {
		c.timer.Stop()
	}
	return true
}

// expire runs when c's current deadline passes: the first-byte deadline
// (c moves on to the rest of Timeout if its first byte came) or Timeout.
func (l *Limiter) expire(c *Conn) {
	l.mu.Lock()
	if c.inOrder == nil {
		l.mu.Unlock()
		return
	}
	reason := Timeout
	if !c.handshake {
		if c.firstByte.Load() {
			c.handshake = true
			c.timer = l.clock.AfterFunc(l.timeout-l.firstByte, func() { l.expire(c) })
			l.mu.Unlock()
			return
		}
		reason = FirstByteTimeout
	}
	l.removeLocked(c)
	l.mu.Unlock()
	l.drop(c, reason, nil)
}

// drop closes a connection taken out of the table and records why
// (counted first, so whoever sees the close sees the count).
func (l *Limiter) drop(c *Conn, r Reason, err error) {
	l.dropped[r].Add(1)
	_ = c.Conn.Close()
	l.report(r, c.source, err)
}

// Conn is a tracked connection. Reads mark its first byte; Close takes it
// out of the table.
type Conn struct {
	net.Conn
	l         *Limiter
	source    string
	firstByte atomic.Bool

	// Guarded by l.mu. inOrder is nil once the connection has left the
	// table (established, closed, dropped).
	inOrder   *list.Element
	inSource  *list.Element
	timer     Timer
	handshake bool // past the first-byte deadline (or there is none)
}

// Read reads from the connection, noting the first byte.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.firstByte.Load() {
		c.firstByte.Store(true)
	}
	return n, err
}

// Established takes c out of the table for good: it has proved itself,
// and is neither evicted nor timed out from now on. It reports whether c
// was still pending (false: it was dropped or closed meanwhile).
func (c *Conn) Established() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.removeLocked(c)
}

// Close takes c out of the table, uncounted, and closes it.
func (c *Conn) Close() error {
	c.Established()
	return c.Conn.Close()
}

// Reject closes c as refused by its owner (what it sent is not what the
// port speaks): it counts as Rejected, and err, which must not quote
// what the peer sent, is the summary line's last_error. A connection that
// had left the table already is just closed.
func (c *Conn) Reject(err error) {
	c.l.mu.Lock()
	in := c.l.removeLocked(c)
	c.l.mu.Unlock()
	if !in {
		_ = c.Conn.Close()
		return
	}
	c.l.drop(c, Rejected, err)
}

// Source is the source the connection is counted under.
func (c *Conn) Source() string { return c.source }

// NetConn is the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Established calls Established on the Conn that nc is or wraps (a
// *tls.Conn's NetConn, and so on down), and reports whether it was
// pending. A connection this package does not track reports false.
func Established(nc net.Conn) bool {
	for range 8 { // wrappers nest a few deep at most
		if c, ok := nc.(*Conn); ok {
			return c.Established()
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		nc = u.NetConn()
	}
	return false
}

// Source is the share key of a remote address: the IPv4 address, or the
// IPv6 /64 (IPv4-mapped IPv6 addresses count as IPv4). An address that is
// not IP keeps its string form.
func Source(a net.Addr) string {
	if a == nil {
		return ""
	}
	var ip netip.Addr
	if t, ok := a.(*net.TCPAddr); ok {
		ip = t.AddrPort().Addr()
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	} else {
		return a.String()
	}
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() {
		return a.String()
	}
	if ip.Is4() {
		return ip.String()
	}
	return netip.PrefixFrom(ip, 64).Masked().String()
}

// reporter rate-limits the summary lines.
type reporter struct {
	mu        sync.Mutex
	last      time.Time // when the last line was written; zero: never
	scheduled bool      // a flush is due at last+logEvery
	counts    [numReasons]uint64
	source    string // the last dropped connection's source
	lastErr   string // the last Reject's error
}

// report counts one drop for the summary line: written at once when no
// line was written for logEvery, else by a flush at the end of the
// interval.
func (l *Limiter) report(r Reason, source string, err error) {
	rp := &l.rep
	rp.mu.Lock()
	rp.counts[r]++
	rp.source = source
	if err != nil {
		rp.lastErr = err.Error()
	}
	if rp.scheduled {
		rp.mu.Unlock()
		return
	}
	now := l.clock.Now()
	if rp.last.IsZero() || now.Sub(rp.last) >= l.logEvery {
		args := rp.takeLocked(now)
		rp.mu.Unlock()
		l.writeSummary(args)
		return
	}
	rp.scheduled = true
	wait := l.logEvery - now.Sub(rp.last)
	rp.mu.Unlock()
	l.clock.AfterFunc(wait, l.flush)
}

// flush writes the counts gathered since the last line.
func (l *Limiter) flush() {
	rp := &l.rep
	rp.mu.Lock()
	rp.scheduled = false
	some := false
	for _, n := range rp.counts {
		some = some || n > 0
	}
	if !some {
		rp.mu.Unlock()
		return
	}
	args := rp.takeLocked(l.clock.Now())
	rp.mu.Unlock()
	l.writeSummary(args)
}

// takeLocked returns the summary's counts and resets them.
func (rp *reporter) takeLocked(now time.Time) []any {
	var args []any
	for r := Reason(0); r < numReasons; r++ {
		if rp.counts[r] > 0 {
			args = append(args, r.String(), rp.counts[r])
		}
	}
	args = append(args, "last_source", rp.source)
	if rp.lastErr != "" {
		args = append(args, "last_error", rp.lastErr)
	}
	rp.counts = [numReasons]uint64{}
	rp.source, rp.lastErr = "", ""
	rp.last = now
	return args
}

func (l *Limiter) writeSummary(counts []any) {
	args := append([]any{"listener", l.name}, counts...)
	args = append(args, "pending", l.Pending(), "max_pending", l.max, "per_source", l.perSource, "interval", l.logEvery)
	l.log.Warn("dropped connections that had not proved themselves (pending-connection limits; counts since the last such line)", args...)
}
