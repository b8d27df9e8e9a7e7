package faultproxy

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// udpEcho echoes every packet to its sender and reports the sender's IP
// and the payload.
type udpSeen struct{ ip, msg string }

func udpEcho(t *testing.T) (addr string, seen <-chan udpSeen) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan udpSeen, 256)
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		b := make([]byte, 2048)
		for i := 0; i < 10000; i++ {
			n, from, err := c.ReadFromUDP(b)
			if err != nil {
				return
			}
			select {
			case ch <- udpSeen{sourceIP(from), string(b[:n])}:
			default:
			}
			_, _ = c.WriteToUDP(b[:n], from)
		}
	}()
	return c.LocalAddr().String(), ch
}

func udpFrom(t *testing.T, ip string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends msg to the relay and waits up to d for the echo.
func exchange(t *testing.T, c *net.UDPConn, relay net.Addr, msg string, d time.Duration) bool {
	t.Helper()
	if _, err := c.WriteTo([]byte(msg), relay); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 2048)
	for {
		n, from, err := c.ReadFrom(b)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if from.String() != relay.String() {
			t.Fatalf("the reply came from %s, not from the relay %s", from, relay)
		}
		if string(b[:n]) == msg {
			return true
		}
		// an earlier, late echo: keep reading
	}
}

func startUDP(t *testing.T, target string) *UDP {
	t.Helper()
	u, err := ListenUDP("127.0.0.11:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// expectSeen waits for the node to see msg, from ip.
func expectSeen(t *testing.T, seen <-chan udpSeen, ip, msg string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case s := <-seen:
			if s.msg != msg {
				continue
			}
			if s.ip != ip {
				t.Fatalf("the node saw %q from %s, want from %s", msg, s.ip, ip)
			}
			return
		case <-deadline:
			t.Fatalf("the node never saw %q", msg)
		}
	}
}

func expectNotSeen(t *testing.T, seen <-chan udpSeen, msg string) {
	t.Helper()
	deadline := time.After(silence)
	for {
		select {
		case s := <-seen:
			if s.msg == msg {
				t.Fatalf("the node saw %q, which the rule should have dropped", msg)
			}
		case <-deadline:
			return
		}
	}
}

func TestUDPRelaysAndRules(t *testing.T) {
	echo, seen := udpEcho(t)
	u := startUDP(t, echo)
	a, b := udpFrom(t, ipA), udpFrom(t, ipB)
	relay := u.Addr()

	if !exchange(t, a, relay, "a1", wait) || !exchange(t, b, relay, "b1", wait) {
		t.Fatal("no echo through the relay")
	}
	expectSeen(t, seen, ipA, "a1")
	expectSeen(t, seen, ipB, "b1")

	u.SetRule(ipA, Rule{Drop: true})
	if exchange(t, a, relay, "a2", silence) {
		t.Fatal("a partitioned source got its echo")
	}
	expectNotSeen(t, seen, "a2")
	if !exchange(t, b, relay, "b2", wait) {
		t.Fatal("a source without a rule was cut off too")
	}

	u.SetRule(ipA, Rule{DropInbound: true})
	if exchange(t, a, relay, "a3", silence) {
		t.Fatal("with inbound dropped the source got an echo")
	}
	expectNotSeen(t, seen, "a3")

	u.SetRule(ipA, Rule{DropOutbound: true})
	if exchange(t, a, relay, "a4", silence) {
		t.Fatal("with outbound dropped the source got the reply")
	}
	expectSeen(t, seen, ipA, "a4") // it reached the node: only the reply is lost

	u.SetRule(ipA, Rule{Delay: 100 * time.Millisecond})
	start := time.Now()
	if !exchange(t, a, relay, "a5", wait) {
		t.Fatal("a delayed source got no echo")
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("a delayed round trip took %v, less than twice the delay", el)
	}

	u.ClearRules()
	if !exchange(t, a, relay, "a6", wait) {
		t.Fatal("no echo after the heal")
	}
	eventually(t, "2 sessions, at least 2 packets dropped in, 1 dropped out, 5 in, 4 out", func() bool {
		s := u.Stats()
		return s.Sessions == 2 && s.DroppedIn >= 2 && s.DroppedOut >= 1 && s.PacketsIn >= 5 && s.PacketsOut >= 4
	})
}

func TestUDPCloseEndsSessions(t *testing.T) {
	echo, _ := udpEcho(t)
	u, err := ListenUDP("127.0.0.11:0", echo)
	if err != nil {
		t.Fatal(err)
	}
	a := udpFrom(t, ipA)
	if !exchange(t, a, u.Addr(), "x", wait) {
		t.Fatal("no echo")
	}
	u.SetRule(ipA, Rule{Delay: time.Hour}) // a packet in flight for an hour
	if _, err := a.WriteTo([]byte("late"), u.Addr()); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { u.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close did not return with a session and a delayed packet pending")
	}
}
