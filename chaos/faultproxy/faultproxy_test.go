package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// Sources the tests dial from: all of 127/8 reaches lo on Linux.
const (
	ipA = "127.0.0.12"
	ipB = "127.0.0.13"
)

// wait is the bound of every wait that should succeed.
const wait = 10 * time.Second

// silence is how long a held-back connection is watched for bytes that
// must not come. It proves nothing about timing, only that nothing
// arrived while the rule held.
const silence = 300 * time.Millisecond

// tcpEcho is an echo server on loopback that also reports the source IP
// of every connection it accepts.
func tcpEcho(t *testing.T) (addr string, sources <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := make(chan string, 64)
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < 64; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case src <- sourceIP(c.RemoteAddr()):
			default:
			}
			go io.Copy(c, c)
		}
	}()
	return ln.Addr().String(), src
}

// eventually polls cond for up to wait: counters move just after the
// bytes they count.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: wait, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d; it reports whether the
// echo came back whole.
func roundTrip(t *testing.T, c net.Conn, msg string, d time.Duration) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		t.Fatalf("read: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return true
}

// readBack reads n bytes within d.
func readBack(t *testing.T, c net.Conn, n int, d time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return string(b)
}

func startTCP(t *testing.T, target string) *TCP {
	t.Helper()
	p, err := ListenTCP("127.0.0.11:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestTCPForwardsFromTheSourceIP(t *testing.T) {
	echo, sources := tcpEcho(t)
	p := startTCP(t, echo)
	c := dialFrom(t, ipA, p.Addr().String())
	if !roundTrip(t, c, "hello", wait) {
		t.Fatal("no echo through the proxy")
	}
	if got := <-sources; got != ipA {
		t.Fatalf("the node saw the proxied connection from %s, want the source's IP %s", got, ipA)
	}
	// A chunk is counted once its write returned, which may be just after
	// the client read it.
	deadline := time.Now().Add(wait)
	for s := p.Stats(); s.Accepted != 1 || s.BytesIn != 5 || s.BytesOut != 5; s = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want 1 accepted, 5 bytes each way", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTCPDropHoldsEstablishedConnections: a partition holds back the
// bytes of an established connection from that source only; lifting it
// delivers them, in order, and the connection flows again.
func TestTCPDropHoldsEstablishedConnections(t *testing.T) {
	echo, _ := tcpEcho(t)
	p := startTCP(t, echo)
	a := dialFrom(t, ipA, p.Addr().String())
	b := dialFrom(t, ipB, p.Addr().String())
	for _, c := range []net.Conn{a, b} {
		if !roundTrip(t, c, "up", wait) {
			t.Fatal("no echo before the partition")
		}
	}
	p.SetRule(ipA, Rule{Drop: true})
	if roundTrip(t, a, "cut", silence) {
		t.Fatal("an established connection from a partitioned source still got its echo")
	}
	if !roundTrip(t, b, "other", wait) {
		t.Fatal("a source without a rule was cut off too")
	}
	eventually(t, "a chunk counted as held back", func() bool { return p.Stats().HeldIn > 0 })
	p.ClearRules()
	if got := readBack(t, a, 3, wait); got != "cut" {
		t.Fatalf("after the heal the held bytes came back as %q, want %q", got, "cut")
	}
	if !roundTrip(t, a, "again", wait) {
		t.Fatal("the connection does not flow after the heal")
	}
}

// TestTCPDropHoldsNewConnections: a new connection from a partitioned
// source never reaches the node; once the rule is lifted it does.
func TestTCPDropHoldsNewConnections(t *testing.T) {
	echo, sources := tcpEcho(t)
	p := startTCP(t, echo)
	p.SetRule(ipA, Rule{Drop: true})
	a := dialFrom(t, ipA, p.Addr().String())
	if roundTrip(t, a, "ping", silence) {
		t.Fatal("a new connection from a partitioned source got its echo")
	}
	select {
	case ip := <-sources:
		t.Fatalf("the node saw a connection from %s during the partition", ip)
	default:
	}
	eventually(t, "connection counted as held at accept", func() bool { return p.Stats().Held == 1 })
	p.SetRule(ipA, Rule{})
	if got := readBack(t, a, 4, wait); got != "ping" {
		t.Fatalf("after the heal got %q, want the held ping", got)
	}
	if !roundTrip(t, dialFrom(t, ipA, p.Addr().String()), "new", wait) {
		t.Fatal("a new connection after the heal does not flow")
	}
}

// TestTCPOneWay: DropInbound loses what the source sends while the node's
// bytes still reach it; DropOutbound the reverse.
func TestTCPOneWay(t *testing.T) {
	// A node that greets every connection, then echoes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	received := make(chan string, 16)
	speak := make(chan string, 16)
	done, quit := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { ln.Close(); close(quit); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		go func() {
			b := make([]byte, 64)
			for {
				n, err := c.Read(b)
				if n > 0 {
					received <- string(b[:n])
				}
				if err != nil {
					return
				}
			}
		}()
		for {
			select {
			case m := <-speak:
				if _, err := c.Write([]byte(m)); err != nil {
					return
				}
			case <-quit:
				return
			}
		}
	}()
	p := startTCP(t, ln.Addr().String())
	a := dialFrom(t, ipA, p.Addr().String())
	if _, err := a.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if got := <-received; got != "hi" {
		t.Fatalf("node received %q", got)
	}

	p.SetRule(ipA, Rule{DropInbound: true})
	if _, err := a.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	speak <- "still"
	if got := readBack(t, a, 5, wait); got != "still" {
		t.Fatalf("with inbound dropped, the node's bytes came back as %q", got)
	}
	select {
	case m := <-received:
		t.Fatalf("with inbound dropped, the node received %q", m)
	case <-time.After(silence):
	}

	p.SetRule(ipA, Rule{DropOutbound: true})
	if got := <-received; got != "lost" {
		t.Fatalf("once inbound flows again the node received %q, want the held %q", got, "lost")
	}
	speak <- "muted"
	_ = a.SetReadDeadline(time.Now().Add(silence))
	if n, err := a.Read(make([]byte, 8)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("with outbound dropped the source read %d bytes (%v)", n, err)
	}
	eventually(t, "held chunks counted both ways", func() bool { s := p.Stats(); return s.HeldIn > 0 && s.HeldOut > 0 })
	p.ClearRules()
	if got := readBack(t, a, 5, wait); got != "muted" {
		t.Fatalf("after the heal got %q", got)
	}
}

// TestTCPDelay: a delayed source still gets every byte in order, and the
// delay counts: a round trip cannot come back before twice the delay
// (once each way). The bound is a lower one, so a slow machine cannot
// fail it.
func TestTCPDelay(t *testing.T) {
	echo, _ := tcpEcho(t)
	p := startTCP(t, echo)
	a := dialFrom(t, ipA, p.Addr().String())
	if !roundTrip(t, a, "warm", wait) {
		t.Fatal("no echo")
	}
	const d = 100 * time.Millisecond
	p.SetRule(ipA, Rule{Delay: d})
	msg := bytes.Repeat([]byte("0123456789"), 10000) // several chunks
	start := time.Now()
	go a.Write(msg)
	got := readBack(t, a, len(msg), wait)
	if got != string(msg) {
		t.Fatal("delayed bytes came back altered or out of order")
	}
	if el := time.Since(start); el < 2*d {
		t.Fatalf("a delayed round trip took %v, less than twice the %v delay", el, d)
	}
}

func TestTCPCloseEndsHeldConnections(t *testing.T) {
	echo, _ := tcpEcho(t)
	p, err := ListenTCP("127.0.0.11:0", echo)
	if err != nil {
		t.Fatal(err)
	}
	p.SetRule(ipA, Rule{Drop: true})
	a := dialFrom(t, ipA, p.Addr().String())
	b := dialFrom(t, ipB, p.Addr().String())
	if !roundTrip(t, b, "x", wait) {
		t.Fatal("no echo")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close did not return with a held connection open")
	}
	for _, c := range []net.Conn{a, b} {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("after Close a connection reads %v, want it closed", err)
		}
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
}

// TestCloseLeavesNoGoroutines: after Close, and once the clients hang up,
// the goroutine count is back where it was before the proxies started,
// with connections that flowed, were held at accept, held mid-stream, and
// UDP sessions with delayed packets.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	echo, _ := tcpEcho(t)
	uecho, _ := udpEcho(t)
	before := runtime.NumGoroutine()

	p, err := ListenTCP("127.0.0.11:0", echo)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ListenUDP("127.0.0.11:0", uecho)
	if err != nil {
		t.Fatal(err)
	}
	var clients []io.Closer
	for i := 0; i < 4; i++ {
		c := dialFrom(t, ipB, p.Addr().String())
		clients = append(clients, c)
		if !roundTrip(t, c, "flow", wait) {
			t.Fatal("no echo")
		}
	}
	p.SetRule(ipB, Rule{Drop: true}) // the four above are held mid-stream
	for _, c := range clients {
		if _, err := c.(net.Conn).Write([]byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	p.SetRule(ipA, Rule{Drop: true})
	clients = append(clients, dialFrom(t, ipA, p.Addr().String())) // held at accept
	for _, ip := range []string{ipA, ipB} {
		c := udpFrom(t, ip)
		clients = append(clients, c)
		if !exchange(t, c, u.Addr(), "x", wait) {
			t.Fatal("no UDP echo")
		}
	}
	u.SetRule(ipA, Rule{Delay: time.Hour})
	if _, err := clients[len(clients)-2].(*net.UDPConn).WriteTo([]byte("late"), u.Addr()); err != nil {
		t.Fatal(err)
	}

	p.Close()
	u.Close()
	for _, c := range clients {
		c.Close()
	}
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before the proxies started:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
