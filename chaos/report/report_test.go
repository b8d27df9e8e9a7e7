package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

const s = int64(time.Second)

func TestBuild(t *testing.T) {
	h := &history.History{Nodes: []string{"n1", "n2"}, End: 3 * s, Ops: []history.Op{
		{Kind: history.Create, Outcome: history.OK, Call: 0, Return: s / 10},
		{Kind: history.Update, Outcome: history.Fail, Code: 409, Call: s / 2, Return: s/2 + s/10},
		{Kind: history.Update, Outcome: history.Unknown, Code: 504, Call: s, Return: s + s/2},
		{Kind: history.Get, Outcome: history.Fail, Code: 0, Call: s + s/2, Return: s + s/2 + 1},
		// sent before the fault: not the first write after it
		{Kind: history.Create, Outcome: history.OK, Call: s + s/10, Return: 2*s + s/10},
		{Kind: history.Delete, Outcome: history.OK, Call: 2*s + s/5, Return: 2*s + s/2},
	}}
	faults := []Fault{{Name: "kill", Node: "n1", Start: s + s/5, Healed: 2 * s, Recovered: 2 * s}, {Name: "pause", Node: "n2", Start: 2*s + s/2 + 1}}
	for _, tc := range []struct {
		name   string
		checks []Check
		want   string
	}{
		{"all ok", []Check{{Name: "a", OK: true}, {Name: "b", Skipped: "no CSRs"}}, Pass},
		{"one failed", []Check{{Name: "a", OK: true}, {Name: "b", Violations: []string{"x"}}}, Fail},
		{"inconclusive", []Check{{Name: "a", OK: true}, {Name: "b", Inconclusive: true}}, Inconclusive},
		{"failed beats inconclusive", []Check{{Name: "a", Inconclusive: true}, {Name: "b"}}, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Build(h, "test", faults, 1, tc.checks)
			if r.Verdict != tc.want {
				t.Errorf("verdict %s, want %s", r.Verdict, tc.want)
			}
		})
	}
	r := Build(h, "test", faults, 1, nil)
	if got := []int{r.Timeline[0].OK, r.Timeline[0].Errors, r.Timeline[1].OK, r.Timeline[1].Errors, r.Timeline[2].OK}; got[0] != 2 || got[1] != 0 || got[2] != 0 || got[3] != 2 || got[4] != 2 {
		t.Errorf("timeline ok/errors = %v, want [2 0 0 2 2]", got)
	}
	if r.Timeline[0].P99 != time.Duration(s/10) {
		t.Errorf("p99 of second 0 = %v, want 100ms", r.Timeline[0].P99)
	}
	if want := time.Duration(2*s + s/2 - (s + s/5)); r.Failover[0] != want {
		t.Errorf("failover after the kill = %v, want %v (the delete, the first write sent after it)", r.Failover[0], want)
	}
	if r.Failover[1] != -1 {
		t.Errorf("failover after the pause = %v, want none", r.Failover[1])
	}
	var b bytes.Buffer
	r.Write(&b, true)
	for _, want := range []string{"trustplane chaos: PASS", "kill", "first write 1.3s", "first write none"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
