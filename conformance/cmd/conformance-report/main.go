// Command conformance-report summarises the ginkgo JSON reports of
// scripts/conformance.sh: with --list, the specs a dry run selected; else a
// Markdown page with the counts per topology, every failure with the reason
// conformance/reasons.yaml gives it (a kind trustplane does not serve, or a
// bug), the specs that skipped themselves and the specs that passed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	"sigs.k8s.io/yaml"
)

// reason says why a spec fails: the first entry whose Spec matches the
// spec's full text and whose Message matches its failure message (an empty
// pattern matches anything) gives the reason.
type reason struct {
	Spec    string `json:"spec,omitempty"`
	Message string `json:"message,omitempty"`
	Kind    string `json:"kind"` // unserved, documented, bug or environment
	Reason  string `json:"reason"`
	spec    *regexp.Regexp
	message *regexp.Regexp
}

func (r *reason) matches(spec, message string) bool {
	return r.spec.MatchString(spec) && r.message.MatchString(message)
}

type reports []string

func (r *reports) String() string     { return strings.Join(*r, ",") }
func (r *reports) Set(v string) error { *r = append(*r, v); return nil }

// result is one spec's outcome in one topology.
type result struct {
	state   types.SpecState
	message string
	runtime time.Duration
}

func main() {
	var rs reports
	list := flag.String("list", "", "print the specs a dry run's JSON report selected, one a line")
	flag.Var(&rs, "report", "NAME=PATH of a ginkgo JSON report (repeat, in column order)")
	reasonsFile := flag.String("reasons", "", "YAML list of {spec, kind, reason}")
	out := flag.String("out", "", "Markdown file to write (default stdout)")
	focus := flag.String("focus", "", "the focus the run used, recorded in the page")
	labels := flag.String("labels", "", "the label filter the run used, recorded in the page")
	flag.Parse()
	if *list != "" {
		if err := printList(*list); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := summarise(rs, *reasonsFile, *out, *focus, *labels); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func load(path string) ([]types.SpecReport, types.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, types.Report{}, err
	}
	var suites []types.Report
	if err := json.Unmarshal(b, &suites); err != nil {
		return nil, types.Report{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(suites) != 1 {
		return nil, types.Report{}, fmt.Errorf("%s: %d suites, want 1", path, len(suites))
	}
	var specs []types.SpecReport
	for _, s := range suites[0].SpecReports {
		if s.LeafNodeType == types.NodeTypeIt {
			specs = append(specs, s)
		}
	}
	return specs, suites[0], nil
}

// selected: the spec ran (or would have, in a dry run), as opposed to being
// left out by the focus, skip or label filter (skipped, with no message).
func selected(s types.SpecReport) bool {
	return s.State != types.SpecStateSkipped || s.Failure.Message != "" || s.RunTime > 0
}

func printList(path string) error {
	specs, _, err := load(path)
	if err != nil {
		return err
	}
	var names []string
	for _, s := range specs {
		if selected(s) {
			names = append(names, s.FullText())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println(n)
	}
	fmt.Fprintf(os.Stderr, "%d specs selected of %d\n", len(names), len(specs))
	return nil
}

func loadReasons(path string) ([]reason, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rs []reason
	if err := yaml.UnmarshalStrict(b, &rs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range rs {
		if rs[i].Spec == "" && rs[i].Message == "" {
			return nil, fmt.Errorf("%s: entry %d has neither spec nor message", path, i+1)
		}
		if rs[i].spec, err = regexp.Compile(rs[i].Spec); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, rs[i].Spec, err)
		}
		if rs[i].message, err = regexp.Compile(rs[i].Message); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, rs[i].Message, err)
		}
		switch rs[i].Kind {
		case "unserved", "documented", "bug", "environment":
		default:
			return nil, fmt.Errorf("%s: %q: kind %q is not unserved, documented, bug or environment", path, rs[i].Spec, rs[i].Kind)
		}
	}
	return rs, nil
}

// firstLine is the start of a failure message, on one line, short.
func firstLine(m string) string {
	m = strings.TrimSpace(m)
	if i := strings.IndexByte(m, '\n'); i >= 0 {
		rest := strings.TrimSpace(m[i+1:])
		m = m[:i]
		// gomega's "Unexpected error:" puts the error on the next lines.
		if strings.HasSuffix(m, ":") && rest != "" {
			j := strings.IndexByte(rest, '\n')
			if j < 0 {
				j = len(rest)
			}
			m += " " + strings.TrimSpace(rest[:j])
		}
	}
	m = strings.Join(strings.Fields(m), " ")
	if len(m) > 240 {
		m = m[:240] + "…"
	}
	return strings.ReplaceAll(m, "|", `\|`)
}

func summarise(rs reports, reasonsFile, out, focus, labels string) error {
	reasons, err := loadReasons(reasonsFile)
	if err != nil {
		return err
	}
	var names []string
	results := map[string]map[string]result{} // spec -> topology -> result
	var b strings.Builder
	fmt.Fprintf(&b, "# Upstream e2e specs against trustplane\n\n")
	fmt.Fprintf(&b, "Generated by `make conformance` (scripts/conformance.sh, conformance/cmd/conformance-report); see\n")
	fmt.Fprintf(&b, "docs/COMPATIBILITY.md, \"Upstream e2e specs\", for how the specs are chosen.\n\n")
	fmt.Fprintf(&b, "- focus: `%s`\n- label filter: `%s`\n- skip: the patterns of `conformance/exclude.txt`\n\n", focus, labels)
	fmt.Fprintf(&b, "| topology | date | suite | selected | passed | failed | skipped by the spec | run time |\n|---|---|---|---|---|---|---|---|\n")
	var tops []string
	for _, r := range rs {
		name, path, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("--report %q: want NAME=PATH", r)
		}
		specs, suite, err := load(path)
		if err != nil {
			return err
		}
		tops = append(tops, name)
		var sel, pass, fail, skip int
		for _, s := range specs {
			if !selected(s) {
				continue
			}
			sel++
			full := s.FullText()
			if results[full] == nil {
				results[full] = map[string]result{}
				names = append(names, full)
			}
			results[full][name] = result{s.State, s.Failure.Message, s.RunTime}
			switch {
			case s.State == types.SpecStatePassed:
				pass++
			case s.State == types.SpecStateSkipped:
				skip++
			default:
				fail++
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %s |\n", name, suite.StartTime.UTC().Format("2006-01-02"),
			suite.SuiteDescription, sel, pass, fail, skip, suite.RunTime.Round(time.Second))
	}
	sort.Strings(names)

	// why: the reason for the first failure of the spec.
	why := func(name string) *reason {
		msg := ""
		for _, t := range tops {
			if res, ok := results[name][t]; ok && res.state != types.SpecStatePassed && res.state != types.SpecStateSkipped {
				msg = res.message
				break
			}
		}
		for i := range reasons {
			if reasons[i].matches(name, msg) {
				return &reasons[i]
			}
		}
		return nil
	}
	cell := func(name, top string) string {
		r, ok := results[name][top]
		if !ok {
			return "–"
		}
		return r.state.String()
	}
	row := func(name string) string {
		var cells []string
		for _, t := range tops {
			cells = append(cells, cell(name, t))
		}
		return strings.Join(cells, " | ")
	}
	header := func(extra ...string) string {
		h := "| spec | " + strings.Join(tops, " | ")
		sep := "|---|" + strings.Repeat("---|", len(tops))
		for _, e := range extra {
			h += " | " + e
			sep += "---|"
		}
		return h + " |\n" + sep + "\n"
	}

	var failed, skipped, passed []string
	for _, n := range names {
		anyFail, allPass, anySkip := false, true, false
		for _, t := range tops {
			r, ok := results[n][t]
			if !ok {
				continue
			}
			switch {
			case r.state == types.SpecStatePassed:
			case r.state == types.SpecStateSkipped:
				anySkip, allPass = true, false
			default:
				anyFail, allPass = true, false
			}
		}
		switch {
		case anyFail:
			failed = append(failed, n)
		case anySkip:
			skipped = append(skipped, n)
		case allPass:
			passed = append(passed, n)
		}
	}

	byKind := map[string]int{}
	fmt.Fprintf(&b, "\n## Failed (%d)\n\nThe reason is conformance/reasons.yaml's: `unserved` (a kind or API trustplane does not serve), `documented` (a difference docs/COMPATIBILITY.md describes), `bug` (trustplane's to fix), `environment` (something else the spec needs of the cluster: nodes, kube-controller-manager, a kubelet). The message is the first failure's, from the first topology it failed in.\n\n", len(failed))
	b.WriteString(header("reason", "failure message"))
	for _, n := range failed {
		r := why(n)
		text := "**unclassified**"
		if r != nil {
			text = fmt.Sprintf("%s: %s", r.Kind, r.Reason)
			byKind[r.Kind]++
		} else {
			byKind["unclassified"]++
		}
		msg := ""
		for _, t := range tops {
			if res, ok := results[n][t]; ok && res.state != types.SpecStatePassed && res.state != types.SpecStateSkipped {
				msg = firstLine(res.message)
				break
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", esc(n), row(n), text, msg)
	}
	if len(failed) > 0 {
		var kinds []string
		for k, c := range byKind {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
		}
		sort.Strings(kinds)
		fmt.Fprintf(&b, "\nFailures by reason: %s.\n", strings.Join(kinds, ", "))
	}

	fmt.Fprintf(&b, "\n## Skipped by the spec itself (%d)\n\n", len(skipped))
	b.WriteString(header("why it skipped"))
	for _, n := range skipped {
		msg := ""
		for _, t := range tops {
			if res, ok := results[n][t]; ok && res.state == types.SpecStateSkipped {
				msg = firstLine(res.message)
				break
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", esc(n), row(n), msg)
	}

	fmt.Fprintf(&b, "\n## Passed (%d)\n\n", len(passed))
	for _, n := range passed {
		fmt.Fprintf(&b, "- %s\n", esc(n))
	}

	if out == "" {
		_, err = os.Stdout.WriteString(b.String())
		return err
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

func esc(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
