package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/trustplane/trustplane/internal/connlimit"
)

// testGossipConns is a gossip stream table of max slots.
func testGossipConns(t *testing.T, max int, firstByte time.Duration) *connlimit.Limiter {
	t.Helper()
	l, err := connlimit.New(connlimit.Config{Name: "gossip", Max: max, FirstByteTimeout: firstByte, Timeout: 10 * time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGossipTransportDialsFromItsBindIP: memberlist's TCP dials (push/pull,
// fallback pings) start from the gossip bind IP, and the kernel-chosen
// port is written back into the config as memberlist itself does.
func TestGossipTransportDialsFromItsBindIP(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	mc := memberlist.DefaultLANConfig()
	mc.BindAddr, mc.BindPort = "127.0.0.12", 0
	bt, err := newBoundTransport(mc, log.New(io.Discard, "", 0), testGossipConns(t, 8, 0), GossipLabelAccept, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Shutdown()
	if mc.BindPort == 0 || mc.AdvertisePort != mc.BindPort {
		t.Fatalf("the bound port was not written back: BindPort %d, AdvertisePort %d", mc.BindPort, mc.AdvertisePort)
	}
	for _, dial := range []func() (net.Conn, error){
		func() (net.Conn, error) { return bt.DialTimeout(peer.Addr().String(), 5*time.Second) },
		func() (net.Conn, error) {
			return bt.DialAddressTimeout(memberlist.Address{Addr: peer.Addr().String(), Name: "n2"}, 5*time.Second)
		},
	} {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		_ = peer.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		a, err := peer.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := a.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.12" {
			t.Fatalf("gossip bound on 127.0.0.12 dialled from %s", got)
		}
		a.Close()
	}
}

// countingReader serves data and counts what was read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// encrypted is the framing of an encrypted memberlist message declaring n
// bytes, followed by filler.
func encrypted(n uint32, filler int) []byte {
	b := []byte{gossipEncryptMsg, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], n)
	return append(b, make([]byte, filler)...)
}

// TestGossipFraming: the guard reads the framing and nothing more, and
// refuses a stream before memberlist would read or allocate for it.
func TestGossipFraming(t *testing.T) {
	label := func(l string, rest []byte) []byte {
		return append(append([]byte{gossipHasLabelMsg, byte(len(l))}, l...), rest...)
	}
	cases := []struct {
		name     string
		stream   []byte
		require  bool
		want     error // nil: accepted
		wantRead int   // bytes the guard may read
	}{
		{"an encrypted message of a plausible size is accepted", encrypted(4096, 4096), false, nil, 5},
		{"exactly the bound is accepted", encrypted(maxGossipStreamBytes, 64), false, nil, 5},
		{"a length over the bound is refused after five bytes", encrypted(maxGossipStreamBytes+1, 1<<20), false, errGossipTooLong, 5},
		{"memberlist's own 20 MiB bound is refused", encrypted(20<<20-1, 1<<20), false, errGossipTooLong, 5},
		{"the largest length is refused", encrypted(1<<32-1, 64), false, errGossipTooLong, 5},
		{"our label is accepted and stripped", label(gossipLabel, encrypted(100, 100)), false, nil, 2 + len(gossipLabel) + 5},
		{"our label is accepted when labels are required", label(gossipLabel, encrypted(100, 100)), true, nil, 2 + len(gossipLabel) + 5},
		{"another label is refused", label("consul", encrypted(100, 100)), false, errGossipForeignLabel, 2 + len("consul")},
		{"an empty label is refused", label("", encrypted(100, 100)), false, errGossipForeignLabel, 2},
		{"no label is refused when labels are required", encrypted(100, 100), true, errGossipUnlabelled, 1},
		{"an unencrypted push/pull is refused", append([]byte{6}, make([]byte, 64)...), false, errGossipNotEncrypted, 1},
		{"a truncated length is not a refusal but an error", []byte{gossipEncryptMsg, 0, 1}, false, io.ErrUnexpectedEOF, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReader{r: bytes.NewReader(tc.stream)}
			pre, err := readGossipFraming(r, tc.require)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if r.n > tc.wantRead {
				t.Fatalf("read %d bytes, at most %d allowed", r.n, tc.wantRead)
			}
			if tc.want != nil {
				return
			}
			// What memberlist reads: the framing without any label, then
			// the rest of the stream.
			rest, _ := io.ReadAll(r)
			got := append(pre, rest...)
			want := tc.stream
			if tc.stream[0] == gossipHasLabelMsg {
				want = tc.stream[2+int(tc.stream[1]):]
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("replayed %d bytes differ from the %d after the label", len(got), len(want))
			}
		})
	}
}

// TestGossipPacketLabels: packets with another label, or without one when
// labels are required, are dropped; ours lose their header.
func TestGossipPacketLabels(t *testing.T) {
	msg := []byte{gossipEncryptMsg, 1, 2, 3}
	cases := []struct {
		name    string
		buf     []byte
		require bool
		want    []byte // nil: dropped
	}{
		{"unlabelled passes while labels are not required", msg, false, msg},
		{"ours is stripped", labelHeader(msg), false, msg},
		{"ours is stripped when required", labelHeader(msg), true, msg},
		{"another label is dropped", append([]byte{gossipHasLabelMsg, 3, 'f', 'o', 'o'}, msg...), false, nil},
		{"a truncated label is dropped", []byte{gossipHasLabelMsg, 30, 't'}, false, nil},
		{"a bare label byte is dropped", []byte{gossipHasLabelMsg}, false, nil},
		{"unlabelled is dropped when required", msg, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bt := &boundTransport{require: tc.require, logger: testLogger()}
			p := &memberlist.Packet{Buf: append([]byte(nil), tc.buf...), From: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
			ok := bt.admitPacket(p)
			if ok != (tc.want != nil) {
				t.Fatalf("admitted %v, want %v", ok, tc.want != nil)
			}
			if ok && !bytes.Equal(p.Buf, tc.want) {
				t.Fatalf("packet %v, want %v", p.Buf, tc.want)
			}
			if !ok && bt.refusedPackets.Load() != 1 {
				t.Fatal("a dropped packet was not counted")
			}
		})
	}
}

// TestGossipStreamsAreBoundedBeforeMemberlistReads: over real sockets,
// streams that declare a huge length are closed after their framing and
// never reach memberlist, silent ones are closed at the first-byte
// deadline, and a well-formed stream still reaches memberlist with its
// bytes intact.
func TestGossipStreamsAreBoundedBeforeMemberlistReads(t *testing.T) {
	mc := memberlist.DefaultLANConfig()
	mc.BindAddr, mc.BindPort = "127.0.0.1", 0
	conns := testGossipConns(t, 4, 200*time.Millisecond)
	bt, err := newBoundTransport(mc, log.New(io.Discard, "", 0), conns, GossipLabelAccept, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Shutdown()
	addr := fmt.Sprintf("127.0.0.1:%d", mc.BindPort)
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}

	// Hostile: each declares 20 MiB and starts sending it.
	for i := range 6 {
		c := dial(fmt.Sprintf("127.0.0.%d", 20+i))
		go c.Write(encrypted(20<<20-1, 256<<10))
		if !closed(c) {
			t.Fatalf("hostile stream %d was not closed", i)
		}
	}
	if n := conns.Dropped(connlimit.Rejected); n != 6 {
		t.Fatalf("%d streams rejected, want 6", n)
	}
	// Silent.
	silent := dial("127.0.0.30")
	if !closed(silent) {
		t.Fatal("a silent stream was not closed")
	}
	waitFor(t, "the first-byte timeout to be counted", func() bool { return conns.Dropped(connlimit.FirstByteTimeout) == 1 })
	// Well-formed, labelled: memberlist gets it, label stripped.
	good := dial("127.0.0.31")
	payload := encrypted(64, 64)
	if _, err := good.Write(labelHeader(payload)); err != nil {
		t.Fatal(err)
	}
	select {
	case sc := <-bt.StreamCh():
		defer sc.Close()
		got := make([]byte, len(payload))
		_ = sc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(sc, got); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("memberlist read %v (%v), want the stream without its label", got, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a well-formed stream did not reach memberlist")
	}
	select {
	case sc := <-bt.StreamCh():
		t.Fatalf("a refused stream reached memberlist: %v", sc.RemoteAddr())
	default:
	}
}

// TestGossipLabelRollingUpgrade: which label modes can gossip with which,
// as memberlists join each other over real sockets with encryption on.
// "old" is a node from before labels (memberlist's plain NetTransport).
// The upgrade path accept → send → require never pairs two nodes that
// cannot talk; memberlist's own Config.Label would (the last case), which
// is why the transport carries the label instead.
func TestGossipLabelRollingUpgrade(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	start := func(t *testing.T, name, mode string) *memberlist.Memberlist {
		t.Helper()
		mc := memberlist.DefaultLANConfig()
		mc.Name = name
		mc.BindAddr, mc.BindPort = "127.0.0.1", 0
		mc.SecretKey = key
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
		mc.Logger = log.New(io.Discard, "", 0)
		mc.TCPTimeout = 2 * time.Second
		switch mode {
		case "old":
		case "native-label":
			mc.Label = gossipLabel
		default:
			bt, err := newBoundTransport(mc, mc.Logger, testGossipConns(t, 8, 0), GossipLabelMode(mode), testLogger())
			if err != nil {
				t.Fatal(err)
			}
			mc.Transport = bt
		}
		ml, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ml.Shutdown() })
		return ml
	}
	cases := []struct {
		joiner, seed string
		ok           bool
	}{
		{"accept", "old", true},
		{"old", "accept", true},
		{"send", "accept", true},
		{"accept", "send", true},
		{"require", "send", true},
		{"send", "require", true},
		{"require", "require", true},
		// Out of order: a step skipped.
		{"send", "old", false},
		{"accept", "require", false},
		// memberlist's own label against a node without one, either way.
		{"native-label", "old", false},
		{"old", "native-label", false},
	}
	for _, tc := range cases {
		t.Run(tc.joiner+" joins "+tc.seed, func(t *testing.T) {
			seed := start(t, "seed", tc.seed)
			joiner := start(t, "joiner", tc.joiner)
			_, err := joiner.Join([]string{seed.LocalNode().Address()})
			if ok := err == nil; ok != tc.ok {
				t.Fatalf("join error %v, want success %v", err, tc.ok)
			}
		})
	}
}

// TestGossipTransportShutdownWithTrafficInFlight: Shutdown returns while
// packets and streams keep arriving and nothing reads them. NetTransport's
// listeners block sending into unbuffered channels, and its Shutdown waits
// for them; once the loops that read those channels had stopped first,
// a packet arriving during shutdown hung it (and with it Leave) for good.
func TestGossipTransportShutdownWithTrafficInFlight(t *testing.T) {
	mc := memberlist.DefaultLANConfig()
	mc.BindAddr, mc.BindPort = "127.0.0.13", 0
	bt, err := newBoundTransport(mc, log.New(io.Discard, "", 0), testGossipConns(t, 8, 0), GossipLabelAccept, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(mc.BindAddr, strconv.Itoa(mc.BindPort))
	udp, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() { // packets and streams until Shutdown has returned, bounded
		defer close(sent)
		for i := 0; i < 2000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = udp.Write([]byte{gossipEncryptMsg, 1, 2, 3})
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				_, _ = c.Write([]byte{gossipEncryptMsg, 0, 0, 0, 4})
				c.Close()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond) // some traffic is in flight, unread
	done := make(chan error, 1)
	go func() { done <- bt.Shutdown() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown hung with traffic in flight")
	}
	close(stop)
	<-sent
	if err := bt.Shutdown(); err != nil { // a second call is harmless
		t.Fatal(err)
	}
}
