package testlog

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Buffer collects log output for assertions on its lines. The zero value
// is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if os.Getenv("TRUSTPLANE_TEST_LOG") != "" {
		os.Stderr.Write(p)
	}
	return b.buf.Write(p)
}

// String is everything logged so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Contains reports whether s was logged.
func (b *Buffer) Contains(s string) bool {
	return strings.Contains(b.String(), s)
}

// Tail is the last n bytes of the log.
func (b *Buffer) Tail(n int) string {
	s := b.String()
	return s[max(0, len(s)-n):]
}

// Logger is a text logger at info level that writes to b.
func (b *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
