package cluster

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

// TestPendingHandshakesAreBounded: idle connections that never start a TLS
// handshake hold at most max slots, each for at most the handshake timeout;
// the rest are closed at accept, and a real peer gets through once the
// idle ones have timed out.
func TestPendingHandshakesAreBounded(t *testing.T) {
	ca := newTestCA(t, "cluster-ca")
	srv, err := newTLSStreamLayer("127.0.0.1:0", "", tlsConfig(ca.nodeCert(t, "server"), ca), testLogger(),
		handshakeLimits{max: 4, timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	refused := make(chan error, 100)
	hook := func(err error) { refused <- err }
	srv.rejectHook.Store(&hook)

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 10 {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// Six are refused at accept, four time out in their handshake.
	var full, timedOut int
	deadline := time.After(10 * time.Second)
	for full < 6 || timedOut < 4 {
		select {
		case err := <-refused:
			if strings.Contains(err.Error(), "in their TLS handshake already") {
				full++
			} else {
				timedOut++
			}
		case <-deadline:
			t.Fatalf("after 10s: %d refused as over the bound, %d timed out; want 6 and 4", full, timedOut)
		}
	}
	if full != 6 {
		t.Fatalf("%d connections refused as over the bound, want 6", full)
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
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("a real peer after the flood: %q %v", buf, err)
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
