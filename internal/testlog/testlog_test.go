package testlog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	log := b.Logger()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log.Info("line", "writer", i)
			_ = b.Contains("line") // reads while others write (-race)
		}()
	}
	log.Debug("below info")
	wg.Wait()
	for i := range 8 {
		if !b.Contains(fmt.Sprintf("writer=%d", i)) {
			t.Fatalf("writer %d's line missing:\n%s", i, b.String())
		}
	}
	if b.Contains("below info") {
		t.Fatal("a debug line was logged at info level")
	}
	if got := strings.Count(b.String(), "\n"); got != 8 {
		t.Fatalf("%d lines, want 8", got)
	}
	if tail := b.Tail(5); len(tail) != 5 || !strings.HasSuffix(b.String(), tail) {
		t.Fatalf("Tail(5) = %q", tail)
	}
	if tail := b.Tail(1 << 20); tail != b.String() {
		t.Fatal("Tail beyond the log's length is not the whole log")
	}
}
