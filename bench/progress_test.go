package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		elapsed, d time.Duration
		want       string
	}{
		{0, time.Second, "[" + strings.Repeat(".", barWidth) + "]"},
		{500 * time.Millisecond, time.Second, "[" + strings.Repeat("#", barWidth/2) + strings.Repeat(".", barWidth/2) + "]"},
		{2 * time.Second, time.Second, "[" + strings.Repeat("#", barWidth) + "]"},
	} {
		if got := bar(tc.elapsed, tc.d); got != tc.want {
			t.Errorf("bar(%v, %v) = %q, want %q", tc.elapsed, tc.d, got, tc.want)
		}
	}
}

func TestProgressLines(t *testing.T) {
	for _, tc := range []struct {
		name     string
		terminal bool
		want     []string
	}{
		{"plain lines when stderr is no terminal", false, []string{"bench: seeding 3 things\n", "bench: create", "2 ops", "1 errors", "done in"}},
		{"one redrawn line on a terminal", true, []string{"\r\033[Kbench: seeding 3 things\n", "\r\033[Kcreate", "[", "2 ops", "1 errors", "done in"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := newProgress(Config{Progress: &buf, Terminal: tc.terminal, ProgressInterval: time.Hour})
			p.logf("seeding %d things", 3)
			rec := newRecorder()
			stop := p.track("create", rec, time.Now(), time.Second)
			rec.success(time.Millisecond)
			rec.success(time.Millisecond)
			rec.failure(errors.New("x"))
			stop()
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q: %q", w, out)
				}
			}
			if !strings.HasSuffix(out, "\n") {
				t.Errorf("the final line does not end the line: %q", out)
			}
		})
	}
}
