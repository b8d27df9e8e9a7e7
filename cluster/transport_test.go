package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/internal/connlimit"
)

func TestTLSStreamLayer(t *testing.T) {
	ours := newTestCA(t, "cluster-ca")
	foreign := newTestCA(t, "foreign-ca")
	server := tlsConfig(ours.nodeCert(t, "server"), ours)

	tests := []struct {
		name string
		// client is the dialling side's TLS config.
		client *tls.Config
		// serverCfg overrides the accepting side's config.
		serverCfg *tls.Config
		// dialOK: the dialler's handshake succeeds; acceptOK: the
		// acceptor's handshake succeeds (the peer is accepted).
		dialOK, acceptOK bool
	}{
		{
			name:   "peer with a certificate from the cluster CA is accepted",
			client: tlsConfig(ours.nodeCert(t, "client"), ours),
			dialOK: true, acceptOK: true,
		},
		{
			// The client trusts our CA, so its handshake completes (TLS 1.3
			// client auth is checked after the client's Finished), but
			// the acceptor must reject the connection.
			name:   "accepted connection with a foreign-CA certificate is rejected",
			client: &tls.Config{Certificates: []tls.Certificate{foreign.nodeCert(t, "intruder")}, RootCAs: ours.pool},
			dialOK: true, acceptOK: false,
		},
		{
			name:   "accepted connection without a client certificate is rejected",
			client: &tls.Config{RootCAs: ours.pool},
			dialOK: true, acceptOK: false,
		},
		{
			name:      "dialling a server with a foreign-CA certificate fails",
			client:    tlsConfig(ours.nodeCert(t, "client"), ours),
			serverCfg: tlsConfig(foreign.nodeCert(t, "impostor"), ours),
			dialOK:    false, acceptOK: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := server
			if tc.serverCfg != nil {
				cfg = tc.serverCfg
			}
			srv, err := newTLSStreamLayer("127.0.0.1:0", "", cfg, testLogger(), handshakeLimits{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			rejected := make(chan error, 1)
			hook := func(err error) {
				select {
				case rejected <- err:
				default:
				}
			}
			srv.rejectHook.Store(&hook)
			cli, err := newTLSStreamLayer("127.0.0.1:0", "", tc.client, testLogger(), handshakeLimits{})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()

			// Accept hands over only connections whose handshake succeeded;
			// a refused one is reported to the reject hook instead.
			accepted := make(chan error, 1)
			go func() {
				conn, err := srv.Accept()
				if err != nil {
					accepted <- err
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 4)
				if _, err := io.ReadFull(conn, buf); err != nil {
					accepted <- err
					return
				}
				_, err = conn.Write([]byte("pong"))
				accepted <- err
			}()

			conn, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
			if (err == nil) != tc.dialOK {
				t.Fatalf("Dial error = %v, want success %v", err, tc.dialOK)
			}
			if err == nil {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, _ = conn.Write([]byte("ping"))
				buf := make([]byte, 4)
				_, rerr := io.ReadFull(conn, buf)
				if tc.acceptOK && rerr != nil {
					t.Fatalf("read from accepted peer: %v", rerr)
				}
				if !tc.acceptOK && rerr == nil {
					t.Fatal("rejected peer could still exchange data")
				}
			}
			if tc.acceptOK {
				if aerr := <-accepted; aerr != nil {
					t.Fatalf("acceptor: %v", aerr)
				}
				return
			}
			select {
			case err := <-rejected:
				if tc.dialOK && err == nil {
					t.Fatal("reject hook without an error")
				}
			case aerr := <-accepted:
				t.Fatalf("acceptor accepted a peer it must reject (err %v)", aerr)
			}
		})
	}
}

// TestPendingHandshakesNeverLockPeersOut: idle connections that never
// start a TLS handshake, from ten addresses (more than the table holds),
// take at most max slots: each new one pushes the oldest out. A real peer
// that dials while the table is full of fresh idle connections gets
// through at once, without waiting for any of them to time out; then the
// idle ones left are closed at the first-byte deadline.
func TestPendingHandshakesNeverLockPeersOut(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv, err := newTLSStreamLayer("127.0.0.1:0", "", tlsConfig(ca.nodeCert(t, "server"), ca), testLogger(),
		handshakeLimits{max: 4, timeout: time.Hour, firstByte: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := range 10 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(20+i))}}
		c, err := d.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		// One at a time, so that which is oldest is well defined.
		waitFor(t, "the idle connection to be tracked", func() bool {
			return srv.pending.Pending()+int(srv.pending.Dropped(connlimit.Evicted)) == i+1
		})
	}
	if p, e := srv.pending.Pending(), srv.pending.Dropped(connlimit.Evicted); p != 4 || e != 6 {
		t.Fatalf("%d pending and %d evicted, want 4 and 6", p, e)
	}
	for i, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if i < 6 {
			if _, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("idle connection %d: %v, want closed (it was among the oldest)", i, err)
			}
		}
	}

	cli, err := newTLSStreamLayer("127.0.0.1:0", "", tlsConfig(ca.nodeCert(t, "client"), ca), testLogger(), handshakeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	go func() {
		if conn, err := srv.Accept(); err == nil {
			conn.Write([]byte("pong"))
			conn.Close()
		}
	}()
	conn, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("a real peer was kept out by idle connections: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("a real peer while the table was full: %q %v", buf, err)
	}
	if e := srv.pending.Dropped(connlimit.Evicted); e != 7 {
		t.Fatalf("%d evicted, want 7 (the peer pushed out the oldest idle connection)", e)
	}
}

// TestPendingHandshakesFirstByteDeadline: a connection that sends nothing
// is closed at the first-byte deadline, though its handshake time is
// long; a TLS handshake that fails is counted as rejected.
func TestPendingHandshakesFirstByteDeadline(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv, err := newTLSStreamLayer("127.0.0.1:0", "", tlsConfig(ca.nodeCert(t, "server"), ca), testLogger(),
		handshakeLimits{max: 8, timeout: time.Hour, firstByte: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	silent, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent connection: %v, want closed by the server", err)
	}
	waitFor(t, "the first-byte timeout to be counted", func() bool { return srv.pending.Dropped(connlimit.FirstByteTimeout) == 1 })

	garbage, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	_, _ = garbage.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	waitFor(t, "the failed handshake to be counted", func() bool { return srv.pending.Dropped(connlimit.Rejected) == 1 })
	if n := srv.pending.Pending(); n != 0 {
		t.Fatalf("%d still pending", n)
	}
}

// TestStreamLayerDialsFromItsBindIP: a node whose raft listens on a
// specific loopback IP dials its peers (raft and the internal RPC) from
// that IP, so a peer, or a fault proxy in between, sees who is calling.
func TestStreamLayerDialsFromItsBindIP(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	src := make(chan string, 2)
	go func() {
		for i := 0; i < 2; i++ {
			c, err := peer.Accept()
			if err != nil {
				return
			}
			src <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close() // the dial's handshake fails; only the source matters
		}
	}()
	for _, c := range []struct{ bind, want string }{
		{"127.0.0.11:0", "127.0.0.11"},
		// Bound to every interface: the kernel chooses, as before.
		{"0.0.0.0:0", "127.0.0.1"},
	} {
		s, err := newTLSStreamLayer(c.bind, "127.0.0.1:1", tlsConfig(ca.nodeCert(t, "n1"), ca), testLogger(), handshakeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Dial(raft.ServerAddress(peer.Addr().String()), 5*time.Second)
		s.Close()
		select {
		case got := <-src:
			if got != c.want {
				t.Fatalf("stream layer bound on %s dialled from %s, want %s", c.bind, got, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the peer saw no connection")
		}
	}
}

// TestRecheckClosesConnectionsOfPeersNoLongerTrusted: with live trust
// (VerifyConnection, no CA pool), Recheck closes every connection past its
// handshake, accepted and dialled, whose peer the trust of the moment
// refuses, and keeps the others.
func TestRecheckClosesConnectionsOfPeersNoLongerTrusted(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	var trusted atomic.Bool
	trusted.Store(true)
	live := func(name string) *tls.Config {
		c := tlsConfig(ca.nodeCert(t, name), ca)
		c.RootCAs, c.ClientCAs = nil, nil
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if !trusted.Load() {
				return errors.New("no longer trusted")
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate")
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			return err
		}
		return c
	}
	srv, err := newTLSStreamLayer("127.0.0.1:0", "", live("server"), testLogger(), handshakeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := newTLSStreamLayer("127.0.0.1:0", "", live("client"), testLogger(), handshakeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := srv.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	conn, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil { // the first byte classifies it as raft
		t.Fatal(err)
	}
	var in net.Conn
	select {
	case in = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing accepted")
	}
	if n := srv.Recheck() + cli.Recheck(); n != 0 {
		t.Fatalf("Recheck closed %d trusted connections", n)
	}
	trusted.Store(false)
	if n := srv.Recheck(); n != 1 {
		t.Fatalf("the acceptor closed %d connections, want the one", n)
	}
	if n := cli.Recheck(); n != 1 {
		t.Fatalf("the dialler closed %d connections, want the one", n)
	}
	_ = in.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The byte that classified it, then nothing: the connection is closed.
	if _, err := io.ReadFull(in, make([]byte, 2)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection of a peer no longer trusted still reads: %v", err)
	}
	if n := srv.Recheck(); n != 0 {
		t.Fatalf("a closed connection was still tracked (%d)", n)
	}
}
