package chaos

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
	"github.com/trustplane/trustplane/chaos/report"
)

// TestCheckRejudgesRecordedFaults: "trustplane chaos check" judges a
// recorded run's rotations and catch-ups again from its faults.json, as
// the run did, and says why it skips them when the run left none.
func TestCheckRejudgesRecordedFaults(t *testing.T) {
	h := &history.History{Nodes: []string{"n1", "n2", "n3"}, StartRV: 1, MaxStaleRead: 5 * time.Second, End: int64(time.Second)}
	measured := report.Recorded{
		Faults: []report.Fault{
			{Name: "rotate", Node: "signing-key rotate", Leader: true, Elections: 1, LeaderChanges: 1, CaughtUp: 5},
			{Name: "full-disk", Node: "n2", Behind: "n2 applied 103221"},
		},
		LeaderChanges: 2, TermRise: 1,
	}
	var buf bytes.Buffer
	if err := report.WriteRecorded(&buf, measured); err != nil {
		t.Fatal(err)
	}
	rec, err := report.ReadRecorded(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		rec         *report.Recorded
		wantVerdict string
		want        map[string]string // check name → "ok", "fail" or the start of its skip reason
	}{
		{"with the run's faults.json", &rec, report.Fail, map[string]string{"rotation": "ok", "catch-up": "fail"}},
		{"without one", nil, report.Pass, map[string]string{"rotation": "no faults.json", "catch-up": "no faults.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Check(h, Config{Out: t.TempDir(), CheckTimeout: time.Second}, tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.wantVerdict {
				t.Fatalf("verdict %s, want %s: %+v", r.Verdict, tc.wantVerdict, r.Checks)
			}
			seen := 0
			for _, c := range r.Checks {
				want, ok := tc.want[c.Name]
				if !ok {
					continue
				}
				seen++
				switch {
				case want == "ok" && (!c.OK || c.Skipped != ""),
					want == "fail" && (c.OK || c.Skipped != "" || !strings.Contains(strings.Join(c.Violations, "\n"), "full-disk on n2")),
					want != "ok" && want != "fail" && !strings.HasPrefix(c.Skipped, want):
					t.Fatalf("check %s = %+v, want %s", c.Name, c, want)
				}
			}
			if seen != len(tc.want) {
				t.Fatalf("checks %+v lack some of %v", r.Checks, tc.want)
			}
			if tc.rec != nil && (r.LeaderChanges != 2 || r.TermRise != 1 || len(r.Faults) != 2) {
				t.Fatalf("the report lost the recorded figures: %d leader changes, term rise %d, %d faults", r.LeaderChanges, r.TermRise, len(r.Faults))
			}
		})
	}
}
