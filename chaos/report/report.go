package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

// Check is one checker's result as the report shows it.
type Check struct {
	Name         string
	OK           bool
	Inconclusive bool
	Skipped      string
	Violations   []string
	Info         []string
}

// Fault is one fault the run injected.
type Fault struct {
	Name   string `json:"name"`
	Node   string `json:"node"`
	Leader bool   `json:"leader"` // the node was the leader when hit
	// Start, Healed and Recovered are ns since the run's start: when the
	// fault began, when it was undone, and when every node was ready again.
	Start     int64  `json:"start"`
	Healed    int64  `json:"healed"`
	Recovered int64  `json:"recovered"`
	Err       string `json:"err,omitempty"`
	// Elections is how far the raft term rose while a rotate fault ran,
	// LeaderChanges how often the leader seen changed: a rotation may
	// cause no election but its own leader kill's, which elects one
	// leader in one round or more (a split vote).
	Elections     int `json:"elections,omitempty"`
	LeaderChanges int `json:"leaderChanges,omitempty"`
	// Flaps are the members a node's gossip saw other than alive while a
	// rotate fault ran, its own leader kill left out.
	Flaps []string `json:"flaps,omitempty"`
	// CaughtUp is when (ns since the run's start) every node had applied
	// what the leader had committed at Recovered; Behind says which were
	// not, if they did not within the bound (chaos.catchUpWithin).
	CaughtUp int64  `json:"caughtUp,omitempty"`
	Behind   string `json:"behind,omitempty"`
}

// Second is one second of the availability timeline.
type Second struct {
	At     int
	OK     int // answered (success, or a definite refusal such as 409)
	Errors int // unavailable or unknown
	P99    time.Duration
}

// Verdicts.
const (
	Pass         = "PASS"
	Fail         = "FAIL"
	Inconclusive = "INCONCLUSIVE"
)

// Report is everything printed at the end of a run.
type Report struct {
	Verdict       string
	Duration      time.Duration
	Nodes         []string
	Mode          string
	Ops           map[history.Kind]map[history.Outcome]int
	Events        int
	Sessions      int
	LeaderChanges int
	// TermRise is how far the raft term rose: one per election round.
	TermRise int
	Checks   []Check
	Faults   []Fault
	Timeline []Second
	// Failover is, per fault, how long after it began the first write
	// that was sent after it succeeded (-1: none did before the run ended).
	Failover []time.Duration
	Files    []string
}

// Build computes the figures.
func Build(h *history.History, mode string, faults []Fault, leaderChanges int, checks []Check) *Report {
	r := &Report{Mode: mode, Nodes: h.Nodes, Faults: faults, LeaderChanges: leaderChanges, Checks: checks,
		Duration: time.Duration(h.End), Events: len(h.Events), Sessions: len(h.Sessions),
		Ops: map[history.Kind]map[history.Outcome]int{}}
	r.Verdict = Pass
	for _, c := range checks {
		switch {
		case c.Skipped != "":
		case c.Inconclusive:
			if r.Verdict == Pass {
				r.Verdict = Inconclusive
			}
		case !c.OK:
			r.Verdict = Fail
		}
	}
	for _, op := range h.Ops {
		m := r.Ops[op.Kind]
		if m == nil {
			m = map[history.Outcome]int{}
			r.Ops[op.Kind] = m
		}
		m[op.Outcome]++
	}
	r.Timeline = timeline(h)
	r.Failover = failovers(h, faults)
	return r
}

// answered: the system did its job, whether the answer was yes or a
// definite no that the client asked for (a conflict, a missing key).
func answered(op history.Op) bool {
	switch op.Outcome {
	case history.OK:
		return true
	case history.Fail:
		return op.Code >= 400 && op.Code < 500 && op.Code != 429
	}
	return false
}

func timeline(h *history.History) []Second {
	secs := int(h.End/int64(time.Second)) + 1
	out := make([]Second, secs)
	lat := make([][]time.Duration, secs)
	for i := range out {
		out[i].At = i
	}
	for _, op := range h.Ops {
		s := int(op.Return / int64(time.Second))
		if s < 0 || s >= secs {
			continue
		}
		if answered(op) {
			out[s].OK++
			lat[s] = append(lat[s], time.Duration(op.Return-op.Call))
		} else {
			out[s].Errors++
		}
	}
	for i, l := range lat {
		if len(l) == 0 {
			continue
		}
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		out[i].P99 = l[(len(l)*99)/100-boolInt(len(l)*99%100 == 0)]
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func failovers(h *history.History, faults []Fault) []time.Duration {
	var writes []history.Op
	for _, op := range h.Ops {
		if op.Kind.IsWrite() && op.Outcome == history.OK {
			writes = append(writes, op)
		}
	}
	sort.Slice(writes, func(a, b int) bool { return writes[a].Return < writes[b].Return })
	out := make([]time.Duration, len(faults))
	for i, f := range faults {
		out[i] = -1
		j := sort.Search(len(writes), func(k int) bool { return writes[k].Return > f.Start })
		for ; j < len(writes); j++ {
			if writes[j].Call >= f.Start {
				out[i] = time.Duration(writes[j].Return - f.Start)
				break
			}
		}
	}
	return out
}

// Write prints the report. With full set it prints every second of the
// timeline; otherwise one line per ten seconds.
func (r *Report) Write(w io.Writer, full bool) {
	fmt.Fprintf(w, "trustplane chaos: %s\n\n", r.Verdict)
	fmt.Fprintf(w, "mode %s, %d nodes (%s), %v, %d leader changes observed, raft term rose by %d\n", r.Mode, len(r.Nodes), strings.Join(r.Nodes, " "), r.Duration.Round(time.Second), r.LeaderChanges, r.TermRise)
	kinds := make([]string, 0, len(r.Ops))
	total := 0
	for k, m := range r.Ops {
		kinds = append(kinds, string(k))
		for _, n := range m {
			total += n
		}
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "%d operations, %d watch events in %d watch sessions\n", total, r.Events, r.Sessions)
	for _, k := range kinds {
		m := r.Ops[history.Kind(k)]
		fmt.Fprintf(w, "  %-12s ok %6d  fail %6d  unknown %5d\n", k, m[history.OK], m[history.Fail], m[history.Unknown])
	}
	fmt.Fprintln(w, "\ncheckers:")
	for _, c := range r.Checks {
		state := "ok"
		switch {
		case c.Skipped != "":
			state = "skipped (" + c.Skipped + ")"
		case c.Inconclusive:
			state = "INCONCLUSIVE"
		case !c.OK:
			state = fmt.Sprintf("FAILED (%d violations)", len(c.Violations))
		}
		fmt.Fprintf(w, "  %-16s %s\n", c.Name, state)
		for _, v := range c.Violations {
			fmt.Fprintf(w, "      - %s\n", v)
		}
		for _, v := range c.Info {
			fmt.Fprintf(w, "      · %s\n", v)
		}
	}
	fmt.Fprintln(w, "\nfaults (time since start; recovery = every node ready again; caught up = every node applied what the leader had committed at recovery; first write = first write sent after the fault that succeeded):")
	for i, f := range r.Faults {
		who := f.Node
		if f.Leader {
			who += " (leader)"
		}
		fo := "none"
		if r.Failover[i] >= 0 {
			fo = r.Failover[i].Round(time.Millisecond).String()
		}
		line := fmt.Sprintf("  %7.1fs %-11s %-14s held %5.1fs  recovered after heal %5.1fs  first write %s",
			secs(f.Start), f.Name, who, secs(f.Healed-f.Start), secs(f.Recovered-f.Healed), fo)
		if f.CaughtUp > 0 {
			line += fmt.Sprintf("  caught up %.1fs later", secs(f.CaughtUp-f.Recovered))
		}
		if f.Behind != "" {
			line += "  behind: " + f.Behind
		}
		if f.Err != "" {
			line += "  error: " + f.Err
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "\navailability (per second: answered, errors, p99 latency of answered):")
	step := 10
	if full {
		step = 1
	}
	for i := 0; i < len(r.Timeline); i += step {
		ok, errs := 0, 0
		var p99 time.Duration
		for _, s := range r.Timeline[i:min(i+step, len(r.Timeline))] {
			ok += s.OK
			errs += s.Errors
			p99 = max(p99, s.P99)
		}
		fmt.Fprintf(w, "  %5ds  ok %5d  err %4d  p99 %s\n", i, ok, errs, p99.Round(time.Millisecond))
	}
	for _, f := range r.Files {
		fmt.Fprintf(w, "\nwrote %s", f)
	}
	if len(r.Files) > 0 {
		fmt.Fprintln(w)
	}
}

func secs(ns int64) float64 { return float64(ns) / float64(time.Second) }
