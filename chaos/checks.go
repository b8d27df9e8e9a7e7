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
// cfg.Out: "trustplane chaos check" on an earlier run's history.json. With
// rec (the run's faults.json) the rotation and catch-up checks are judged
// again too; without it they are skipped, saying why.
func Check(h *history.History, cfg Config, rec *report.Recorded) (*report.Report, error) {
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	return judge(h, cfg, "check", rec), nil
}

// judge runs every checker, the fault checks when rec is given, and
// builds the report: a run and a re-check judge alike.
func judge(h *history.History, cfg Config, mode string, rec *report.Recorded) *report.Report {
	checks, files := runChecks(h, cfg)
	if rec == nil {
		why := "no " + report.FaultsFile + " beside the history (a run of an older build)"
		checks = append(checks, report.Check{Name: "rotation", Skipped: why}, report.Check{Name: "catch-up", Skipped: why})
		r := report.Build(h, mode, nil, 0, checks)
		r.Files = files
		return r
	}
	checks = append(checks, rotationCheck(rec.Faults), catchUpCheck(rec.Faults))
	r := report.Build(h, mode, rec.Faults, rec.LeaderChanges, checks)
	r.TermRise = rec.TermRise
	r.Files = files
	return r
}
