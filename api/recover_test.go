package api

import (
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/internal/testlog"
)

// A panic in a goroutine a request started ends that goroutine, logged,
// and the process (this test) goes on.
func TestGoRecoveringContainsPanics(t *testing.T) {
	var logs testlog.Buffer
	log := logs.Logger()
	done := make(chan struct{})
	goRecovering(log, "test", func() {
		defer close(done)
		var m map[string]int
		m["boom"]++ // a nil map write panics
	})
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := logs.String()
		if strings.Contains(out, "panic in a request's goroutine") && strings.Contains(out, "goroutine=test") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log of the panic: %q", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
