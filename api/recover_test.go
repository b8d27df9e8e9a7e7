package api

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// A panic in a goroutine a request started ends that goroutine, logged,
// and the process (this test) goes on.
func TestGoRecoveringContainsPanics(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	done := make(chan struct{})
	goRecovering(log, "test", func() {
		defer close(done)
		var m map[string]int
		m["boom"]++ // a nil map write panics
	})
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if strings.Contains(out, "panic in a request's goroutine") && strings.Contains(out, "goroutine=test") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log of the panic: %q", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
