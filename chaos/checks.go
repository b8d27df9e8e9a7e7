package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trustplane/trustplane/chaos/check"
	"github.com/trustplane/trustplane/chaos/history"
	"github.com/trustplane/trustplane/chaos/report"
)

// runChecks runs every checker and writes porcupine's visualisation when
// linearizability failed; it returns the results and the files written.
func runChecks(h *history.History, cfg Config) ([]report.Check, []string) {
	results, vis := check.All(h, check.Options{LinearizabilityTimeout: cfg.CheckTimeout})
	var files []string
	if vis != nil {
		p := filepath.Join(cfg.Out, "linearizability.html")
		if f, err := os.Create(p); err == nil {
			if err := vis.WriteHTML(f); err == nil {
				files = append(files, p)
			}
			f.Close()
		}
	}
	out := make([]report.Check, 0, len(results))
	for _, r := range results {
		c := report.Check{Name: r.Name, OK: r.OK, Violations: r.Violations, Info: r.Info}
		if r.Dropped > 0 {
			c.Violations = append(c.Violations, fmt.Sprintf("... and %d more", r.Dropped))
		}
		if strings.HasPrefix(r.Skipped, "inconclusive") {
			c.Inconclusive = true
			c.Info = append(c.Info, r.Skipped)
		} else {
			c.Skipped = r.Skipped
		}
		out = append(out, c)
	}
	return out, files
}

// Check runs the checkers on a recorded history and writes the report to
// cfg.Out: "trustplane chaos check" on an earlier run's history.json.
func Check(h *history.History, cfg Config) (*report.Report, error) {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	checks, files := runChecks(h, cfg)
	r := report.Build(h, "check", nil, 0, checks)
	r.Files = files
	return r, nil
}
