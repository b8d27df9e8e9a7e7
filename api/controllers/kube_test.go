package controllers

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestFirstDiscoveryWaitsForAnAnswer: kube's namespace deleter exits the
// process when its first discovery finds nothing, so firstDiscovery asks
// until discovery names a resource, hands that answer to the first caller,
// and asks afresh after that; a term that ends first gets an error.
func TestFirstDiscoveryWaitsForAnAnswer(t *testing.T) {
	calls := 0
	answer := []*metav1.APIResourceList{{GroupVersion: "v1"}}
	discover := func() ([]*metav1.APIResourceList, error) {
		calls++
		if calls < 3 {
			return nil, errors.New("not yet")
		}
		return answer, nil
	}
	fn, err := firstDiscovery(context.Background(), discover)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Fatalf("%d discovery calls before an answer, want 3", calls)
	}
	if got, err := fn(); err != nil || len(got) != 1 || calls != 3 {
		t.Fatalf("first call: %v %v after %d calls; want the awaited answer without a new call", got, err, calls)
	}
	if _, err := fn(); err != nil || calls != 4 {
		t.Fatalf("second call: %v after %d calls; want a fresh discovery", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := func() ([]*metav1.APIResourceList, error) { return nil, errors.New("down") }
	if _, err := firstDiscovery(ctx, never); !errors.Is(err, context.Canceled) {
		t.Fatalf("firstDiscovery after the term ended: %v, want context.Canceled", err)
	}
}
