package controllers

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestTermConnectionsCloseWithTheTerm: closeAll closes every connection a
// term dialled, busy or idle, and refuses new ones, so no connection (and
// no transport goroutine reading from one) outlives the term.
func TestTermConnectionsCloseWithTheTerm(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()

	var cs conns
	ctx := context.Background()
	a, err := cs.dial(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := cs.dial(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// A connection closed during the term leaves the tracker.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	cs.mu.Lock()
	open := len(cs.open)
	cs.mu.Unlock()
	if open != 1 {
		t.Fatalf("%d connections tracked after one of two closed, want 1", open)
	}

	cs.closeAll()
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a connection of an ended term: %v, want net.ErrClosed", err)
	}
	if _, err := cs.dial(ctx, "tcp", l.Addr().String()); !errors.Is(err, errTermEnded) {
		t.Fatalf("dial after the term ended: %v, want errTermEnded", err)
	}
}
