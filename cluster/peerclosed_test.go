//go:build unix

package cluster

import (
	"net"
	"testing"
	"time"
)

// TestPeerClosed: an idle connection is open until its peer closes it or
// sends something unasked; looking consumes nothing.
func TestPeerClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		peer func(net.Conn)
		want bool
	}{
		{"an idle peer", func(net.Conn) {}, false},
		{"a peer that closed", func(c net.Conn) { _ = c.Close() }, true},
		{"a peer that sent unasked bytes", func(c net.Conn) { _, _ = c.Write([]byte("x")) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			tc.peer(server)
			// What the peer did reaches this end over loopback within
			// moments; an idle peer must stay open all the while.
			got := false
			for i := 0; i < 100 && !got; i++ {
				got = peerClosed(client)
				time.Sleep(5 * time.Millisecond)
			}
			if got != tc.want {
				t.Fatalf("peerClosed = %v, want %v", got, tc.want)
			}
			if tc.want {
				return
			}
			// Looking consumed nothing and left the connection usable.
			if _, err := server.Write([]byte("y")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := client.Read(b); err != nil || b[0] != 'y' {
				t.Fatalf("read %q, %v after peerClosed", b, err)
			}
		})
	}
}
