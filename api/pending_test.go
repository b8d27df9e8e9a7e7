package api

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/internal/connlimit"
)

// servingServer is a Server listening on 127.0.0.1 with httptest's
// certificate, and a client that trusts it.
func servingServer(t *testing.T, mod func(*Config)) (*Server, *http.Client) {
	t.Helper()
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	cert, client := ts.TLS.Certificates[0], ts.Client()
	ts.Close()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	mod(cfg)
	stor, err := storage.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, registry.New(stor, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.http.Close() })
	return s, client
}

// dialFrom opens a TCP connection to addr from the loopback address src
// (any 127.0.0.0/8 address is this host), so a test can play several
// client addresses.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reads from c until the server closes it (true) or the
// bound passes with c open (false).
func closedByServer(c net.Conn, bound time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(bound))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

// TestPendingConnectionsNeverLockOutClients: a pending table kept full by
// idle connections from several addresses does not refuse a client: the
// client's connection pushes the oldest idle one out, and it is served.
// The idle connections stay within their first-byte time (a minute here),
// so nothing but the eviction can let the client in.
func TestPendingConnectionsNeverLockOutClients(t *testing.T) {
	s, client := servingServer(t, func(c *Config) {
		c.MaxPendingConnections = 4
		c.FirstByteTimeout = time.Minute
		c.HandshakeTimeout = 2 * time.Minute
	})
	addr := s.Addr().String()
	var idle []net.Conn
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		idle = append(idle, dialFrom(t, src, addr))
	}
	waitUntil(t, func() bool { return s.pending.Pending() == 4 })

	resp, err := client.Get("https://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("a client was locked out by idle connections: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("/readyz: %d %q", resp.StatusCode, body)
	}
	if !closedByServer(idle[0], 10*time.Second) {
		t.Fatal("the oldest idle connection was not closed to make room")
	}
	for i, c := range idle[1:] {
		if closedByServer(c, 50*time.Millisecond) {
			t.Fatalf("idle connection %d was closed; only the oldest had to go", i+1)
		}
	}
	if n := s.pending.Dropped(connlimit.Evicted); n != 1 {
		t.Fatalf("%d evictions counted, want 1", n)
	}
	// The served connection left the table: it is established, not pending.
	waitUntil(t, func() bool { return s.pending.Pending() == 3 })

	rec := httptest.NewRecorder()
	s.metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metricsPath, nil))
	if want := `trustplane_connections_dropped_total{listener="api",reason="evicted"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
}

// TestPendingConnectionsFirstByteDeadline: a connection that sends nothing
// is closed at the first-byte deadline, long before the handshake
// timeout, while a client that starts its handshake at once is served.
func TestPendingConnectionsFirstByteDeadline(t *testing.T) {
	s, client := servingServer(t, func(c *Config) {
		c.MaxPendingConnections = 64
		c.FirstByteTimeout = 200 * time.Millisecond
		c.HandshakeTimeout = time.Hour
	})
	addr := s.Addr().String()
	silent := dialFrom(t, "127.0.0.2", addr)
	if !closedByServer(silent, 30*time.Second) {
		t.Fatal("a silent connection was not closed")
	}
	if n := s.pending.Dropped(connlimit.FirstByteTimeout); n != 1 {
		t.Fatalf("%d first-byte timeouts counted, want 1", n)
	}
	resp, err := client.Get("https://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/livez: %d", resp.StatusCode)
	}
	if n := s.pending.Dropped(connlimit.FirstByteTimeout); n != 1 {
		t.Fatalf("a served client counted as a first-byte timeout (%d)", n)
	}
}

func TestPendingConnectionsConfig(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"negative per-source share":        func(c *Config) { c.MaxPendingConnectionsPerSource = -1 },
		"negative first-byte timeout":      func(c *Config) { c.FirstByteTimeout = -time.Second },
		"a table without a handshake time": func(c *Config) { c.HandshakeTimeout = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{}}}
			mod(cfg)
			if err := cfg.Validate(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	// 0 disables the table altogether, as before.
	cfg := DefaultConfig()
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{}}}
	cfg.MaxPendingConnections, cfg.HandshakeTimeout = 0, 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
