package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestHCLogAdapter(t *testing.T) {
	tests := []struct {
		name string
		log  func(hclog.Logger)
		want string // substring expected in the output; "" means no output
	}{
		{"info reaches slog with the logger name", func(l hclog.Logger) { l.Info("elected", "term", 3) }, "msg=elected logger=raft term=3"},
		{"warn reaches slog", func(l hclog.Logger) { l.Warn("slow") }, "level=WARN"},
		{"debug is dropped", func(l hclog.Logger) { l.Debug("rpc") }, ""},
		{"trace is dropped", func(l hclog.Logger) { l.Trace("rpc") }, ""},
		{"named and with carry through", func(l hclog.Logger) { l.Named("snapshot").With("id", "x").Error("boom") }, "msg=boom id=x logger=raft.snapshot"},
		{"standard logger writes at info", func(l hclog.Logger) { l.StandardLogger(nil).Print("legacy") }, "msg=legacy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			sl := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4}))
			tc.log(newHCLogAdapter(sl, "raft"))
			out := buf.String()
			if tc.want == "" && out != "" {
				t.Fatalf("unexpected output %q", out)
			}
			if tc.want != "" && !strings.Contains(out, tc.want) {
				t.Fatalf("output %q lacks %q", out, tc.want)
			}
		})
	}
}
