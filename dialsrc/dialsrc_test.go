package dialsrc

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestLocalAddrRule(t *testing.T) {
	cases := []struct {
		name       string
		bind, dest string
		want       string // "" means leave it to the kernel
	}{
		{"a loopback bind is the source for a loopback destination", "127.0.0.11", "127.0.0.12:7000", "127.0.0.11"},
		{"a bind given as host:port uses its host", "127.0.0.11:7000", "127.0.0.12:7000", "127.0.0.11"},
		{"a non-loopback bind is the source for a non-loopback destination", "10.0.0.5", "10.0.0.6:7000", "10.0.0.5"},
		{"an IPv6 loopback bind is the source for an IPv6 loopback destination", "::1", "[::1]:7000", "::1"},
		{"a loopback bind is not the source for a remote destination", "127.0.0.11", "10.0.0.6:7000", ""},
		{"a remote bind is not the source for a loopback destination", "10.0.0.5", "127.0.0.1:7000", ""},
		{"an unspecified IPv4 bind leaves the kernel to choose", "0.0.0.0", "10.0.0.6:7000", ""},
		{"an unspecified IPv6 bind leaves the kernel to choose", "::", "[fd00::6]:7000", ""},
		{"an empty bind leaves the kernel to choose", "", "127.0.0.12:7000", ""},
		{"a host name bind leaves the kernel to choose", "node-1.example", "10.0.0.6:7000", ""},
		{"a host name destination leaves the kernel to choose", "10.0.0.5", "node-2.example:7000", ""},
		{"a destination without a port leaves the kernel to choose", "10.0.0.5", "10.0.0.6", ""},
		{"an unspecified destination leaves the kernel to choose", "127.0.0.11", "0.0.0.0:7000", ""},
		{"families must match: IPv4 bind, IPv6 destination", "10.0.0.5", "[fd00::6]:7000", ""},
		{"families must match: IPv6 bind, IPv4 destination", "fd00::5", "10.0.0.6:7000", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := LocalAddr(c.bind, c.dest)
			switch {
			case c.want == "" && got != nil:
				t.Fatalf("LocalAddr(%q, %q) = %v, want nil", c.bind, c.dest, got)
			case c.want != "" && got == nil:
				t.Fatalf("LocalAddr(%q, %q) = nil, want %s", c.bind, c.dest, c.want)
			case c.want != "" && (!got.IP.Equal(net.ParseIP(c.want)) || got.Port != 0):
				t.Fatalf("LocalAddr(%q, %q) = %v, want %s port 0", c.bind, c.dest, got, c.want)
			}
		})
	}
}

// TestDialContextSourceIP dials a real loopback listener and checks the
// source address the listener sees.
func TestDialContextSourceIP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 2)
	go func() {
		for i := 0; i < 2; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			got <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}
	}()
	for _, c := range []struct{ bind, want string }{{"127.0.0.13", "127.0.0.13"}, {"0.0.0.0", "127.0.0.1"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := DialContext(c.bind, net.Dialer{})(ctx, "tcp", ln.Addr().String())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		select {
		case ip := <-got:
			if ip != c.want {
				t.Fatalf("bound to %s: the listener saw source %s, want %s", c.bind, ip, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the listener accepted nothing")
		}
	}
}
