package cluster

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets raft, which logs through hclog, write to the node's
// slog.Logger, so one process has one log stream and one format. It keeps
// raft at Info and above unless SetLevel is called: raft's Debug output is a
// line per RPC.
type hclogAdapter struct {
	l       *slog.Logger // already carries the implied args
	name    string
	implied []any
	level   *atomic.Int32 // shared by derived loggers, as in hclog
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(l *slog.Logger, name string) *hclogAdapter {
	lv := new(atomic.Int32)
	lv.Store(int32(hclog.Info))
	return &hclogAdapter{l: l, name: name, level: lv}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if level == hclog.Off || level < h.GetLevel() {
		return
	}
	sl := slogLevel(level)
	ctx := context.Background()
	if !h.l.Enabled(ctx, sl) {
		return
	}
	if h.name != "" {
		args = append([]any{"logger", h.name}, args...)
	}
	h.l.Log(ctx, sl, msg, args...)
}

func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) enabled(level hclog.Level) bool {
	return level >= h.GetLevel() && h.l.Enabled(context.Background(), slogLevel(level))
}

func (h *hclogAdapter) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogAdapter) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogAdapter) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogAdapter) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogAdapter) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogAdapter) ImpliedArgs() []any { return h.implied }

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(h.implied[:len(h.implied):len(h.implied)], args...)
	c.l = h.l.With(args...)
	return &c
}

func (h *hclogAdapter) Name() string { return h.name }

func (h *hclogAdapter) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *hclogAdapter) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }
func (h *hclogAdapter) GetLevel() hclog.Level      { return hclog.Level(h.level.Load()) }

func (h *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{h: h, level: level}
}

// stdWriter turns each Write from a standard library logger into one log
// record.
type stdWriter struct {
	h     *hclogAdapter
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	w.h.Log(w.level, strings.TrimRight(string(p), "\r\n"))
	return len(p), nil
}
