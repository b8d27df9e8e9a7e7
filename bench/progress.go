package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// terminalRefresh is how often the live line is redrawn on a terminal.
const terminalRefresh = 250 * time.Millisecond

// barWidth is the width of the progress bar in characters.
const barWidth = 24

// progress writes what the run is doing: on a terminal one line redrawn in
// place with a bar, otherwise a plain line every interval. A nil writer
// writes nothing.
type progress struct {
	w        io.Writer
	terminal bool
	interval time.Duration
	mu       sync.Mutex
}

func newProgress(c Config) *progress {
	return &progress{w: c.Progress, terminal: c.Terminal, interval: c.ProgressInterval}
}

// logf writes one line of its own.
func (p *progress) logf(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "bench: "+format+"\n", args...)
}

// track shows name's progress until the returned stop is called, which
// writes the final line.
func (p *progress) track(name string, rec *recorder, start time.Time, d time.Duration) (stop func()) {
	if p == nil || p.w == nil {
		return func() {}
	}
	every := p.interval
	if p.terminal {
		every = terminalRefresh
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.show(name, rec, start, d, false)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		p.show(name, rec, start, d, true)
	}
}

// show writes one progress line.
func (p *progress) show(name string, rec *recorder, start time.Time, d time.Duration, final bool) {
	ok, errs := rec.counts()
	elapsed := time.Since(start)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(ok) / elapsed.Seconds()
	}
	status := fmt.Sprintf("%s/%s", elapsed.Truncate(100*time.Millisecond), d)
	if final {
		status = "done in " + elapsed.Truncate(100*time.Millisecond).String()
	} else if elapsed > d {
		status = "finishing the last operations"
	}
	counts := fmt.Sprintf("%d ops  %.0f/s  %d errors", ok, rate, errs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.terminal {
		fmt.Fprintf(p.w, "bench: %-12s %s  %s\n", name, status, counts)
		return
	}
	fmt.Fprintf(p.w, "\r\033[K%-12s %s %s  %s", name, bar(elapsed, d), status, counts)
	if final {
		fmt.Fprintln(p.w)
	}
}

// bar draws elapsed out of d.
func bar(elapsed, d time.Duration) string {
	filled := barWidth
	if elapsed < d {
		filled = int(float64(barWidth) * float64(elapsed) / float64(d))
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled) + "]"
}
