package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// promQuery is what promqlRefs finds in one PromQL expression: the metric
// names it selects, the label names each selector matches on, and the
// label names its by/without/on/ignoring/group_left/group_right clauses
// list. It is no PromQL parser: a lexer that knows which identifiers are
// functions, aggregations and keywords, enough to keep the dashboard and
// the alert rules honest against a real scrape (TestE2EGrafanaAndAlerts).
type promQuery struct {
	metrics  []string            // sorted, unique
	selector map[string][]string // metric -> label names matched in its {...}
	grouping []string            // sorted, unique
}

// promFunctions are PromQL's functions and aggregation operators: an
// identifier followed by "(" must be one of them.
var promFunctions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
		abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week day_of_year
		days_in_month delta deriv exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
		histogram_stddev histogram_stdvar histogram_sum hour idelta increase irate label_join label_replace ln
		log2 log10 minute month predict_linear rate resets round scalar sgn sort sort_desc sort_by_label
		sort_by_label_desc sqrt time timestamp vector year avg_over_time min_over_time max_over_time
		sum_over_time count_over_time quantile_over_time stddev_over_time stdvar_over_time last_over_time
		present_over_time acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh deg pi rad`) {
		promFunctions[f] = true
	}
}

// promAggregations are the aggregation operators, which may take their
// by or without clause before their parentheses.
var promAggregations = map[string]bool{}

func init() {
	for _, a := range strings.Fields(`sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`) {
		promAggregations[a] = true
	}
}

// promKeywords are identifiers that are neither metrics nor functions.
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true,
}

// promGrouping are the keywords followed by a list of label names
// (group_left and group_right may stand without one).
var promGrouping = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// promqlRefs lexes expr. Grafana's variables ($job, ${datasource},
// $__rate_interval) may stand where a string or a duration does.
func promqlRefs(expr string) (promQuery, error) {
	q := promQuery{selector: map[string][]string{}}
	metrics, grouping := map[string]bool{}, map[string]bool{}
	i, depth := 0, 0
	skipSpace := func() {
		for i < len(expr) && strings.ContainsRune(" \t\r\n", rune(expr[i])) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(expr) && isIdentChar(expr[i]) {
			i++
		}
		return expr[start:i]
	}
	// str skips a quoted string starting at i.
	str := func() error {
		quote := expr[i]
		for i++; i < len(expr); i++ {
			switch {
			case expr[i] == '\\' && quote != '`':
				i++
			case expr[i] == quote:
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	// labels reads "(a, b, ...)" at i into grouping.
	labels := func(kw string) error {
		skipSpace()
		if i >= len(expr) || expr[i] != '(' {
			if kw == "group_left" || kw == "group_right" {
				return nil
			}
			return fmt.Errorf("%s without a label list in %q", kw, expr)
		}
		i++
		for {
			skipSpace()
			if i < len(expr) && expr[i] == ')' {
				i++
				return nil
			}
			l := ident()
			if l == "" {
				return fmt.Errorf("%s: bad label list at %d in %q", kw, i, expr)
			}
			grouping[l] = true
			skipSpace()
			if i < len(expr) && expr[i] == ',' {
				i++
			}
		}
	}
	// matchers reads "{l="v", ...}" at i, returning the label names.
	matchers := func() ([]string, error) {
		var names []string
		i++ // {
		for {
			skipSpace()
			if i >= len(expr) {
				return nil, fmt.Errorf("unterminated selector in %q", expr)
			}
			if expr[i] == '}' {
				i++
				return names, nil
			}
			l := ident()
			if l == "" {
				return nil, fmt.Errorf("bad label matcher at %d in %q", i, expr)
			}
			skipSpace()
			op := ""
			for i < len(expr) && strings.IndexByte("=!~", expr[i]) >= 0 {
				op += string(expr[i])
				i++
			}
			if !slices.Contains([]string{"=", "!=", "=~", "!~"}, op) {
				return nil, fmt.Errorf("bad matcher operator %q for %s in %q", op, l, expr)
			}
			skipSpace()
			if i >= len(expr) || !strings.ContainsRune(`"'`+"`", rune(expr[i])) {
				return nil, fmt.Errorf("matcher %s%s without a quoted value in %q", l, op, expr)
			}
			if err := str(); err != nil {
				return nil, err
			}
			names = append(names, l)
			skipSpace()
			if i < len(expr) && expr[i] == ',' {
				i++
			}
		}
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case strings.ContainsRune(" \t\r\n+-*/%^=!<>,", rune(c)):
			i++
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return q, fmt.Errorf("unbalanced ) at %d in %q", i, expr)
			}
			i++
		case c == '[':
			// A range or subquery: durations and Grafana variables.
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return q, fmt.Errorf("unterminated [ in %q", expr)
			}
			i += end + 1
		case c == '"' || c == '\'' || c == '`':
			if err := str(); err != nil {
				return q, err
			}
		case c == '{':
			return q, fmt.Errorf("a selector without a metric name at %d in %q", i, expr)
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdentChar(expr[i]) || expr[i] == '.') {
				i++ // numbers, and durations after offset
			}
		case c == '$':
			return q, fmt.Errorf("a Grafana variable outside a string or range at %d in %q", i, expr)
		case isIdentStart(c):
			start := i
			id := ident()
			skipSpace()
			next := byte(0)
			if i < len(expr) {
				next = expr[i]
			}
			switch {
			case promGrouping[id]:
				if err := labels(id); err != nil {
					return q, err
				}
			case promKeywords[strings.ToLower(id)]:
			case promAggregations[id] && (strings.HasPrefix(expr[i:], "by") || strings.HasPrefix(expr[i:], "without")):
				// sum by (...) (...): the clause comes next.
			case next == '(':
				if !promFunctions[id] {
					return q, fmt.Errorf("unknown function %s at %d in %q", id, start, expr)
				}
			default:
				metrics[id] = true
				if next == '{' {
					names, err := matchers()
					if err != nil {
						return q, err
					}
					q.selector[id] = append(q.selector[id], names...)
				}
			}
		default:
			return q, fmt.Errorf("unexpected %q at %d in %q", c, i, expr)
		}
	}
	if depth != 0 {
		return q, fmt.Errorf("unbalanced ( in %q", expr)
	}
	q.metrics = sortedKeys(metrics)
	q.grouping = sortedKeys(grouping)
	return q, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestPromQLRefs(t *testing.T) {
	for _, tc := range []struct {
		expr     string
		metrics  []string
		selector map[string][]string
		grouping []string
	}{
		{expr: `up == 0`, metrics: []string{"up"}},
		{expr: `count without (instance) (sum by(job)(x) > 0)`, metrics: []string{"x"}, grouping: []string{"instance", "job"}},
		{expr: `trustplane_raft_is_leader{job=~"$job", instance=~"$instance"}`,
			metrics: []string{"trustplane_raft_is_leader"}, selector: map[string][]string{"trustplane_raft_is_leader": {"job", "instance"}}},
		{expr: `sum by (verb, code) (rate(apiserver_request_total{code=~"5..",verb!~"WATCH|CONNECT"}[$__rate_interval]))`,
			metrics: []string{"apiserver_request_total"}, selector: map[string][]string{"apiserver_request_total": {"code", "verb"}},
			grouping: []string{"code", "verb"}},
		{expr: "histogram_quantile(0.99, sum(rate(apiserver_request_duration_seconds_bucket{verb=\"GET\"}[5m])) without(instance))\n > 1",
			metrics: []string{"apiserver_request_duration_seconds_bucket"}, selector: map[string][]string{"apiserver_request_duration_seconds_bucket": {"verb"}},
			grouping: []string{"instance"}},
		{expr: `max by (job) (trustplane_raft_commit_index) - on (job) group_right trustplane_raft_applied_index > 1e3`,
			metrics: []string{"trustplane_raft_applied_index", "trustplane_raft_commit_index"}, grouping: []string{"job"}},
		{expr: `rate(a_total[5m]) * on (instance, group) group_left (removed_release) b offset 5m and bool c unless d`,
			metrics: []string{"a_total", "b", "c", "d"}, grouping: []string{"group", "instance", "removed_release"}},
		{expr: `absent(up{job=~".*trust}plane.*"} == 1)`, metrics: []string{"up"}, selector: map[string][]string{"up": {"job"}}},
		{expr: `rate(x[5m:30s]) / ignoring(code) y{a='it\'s'}`, metrics: []string{"x", "y"}, selector: map[string][]string{"y": {"a"}}, grouping: []string{"code"}},
	} {
		q, err := promqlRefs(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if tc.selector == nil {
			tc.selector = map[string][]string{}
		}
		if !slices.Equal(q.metrics, tc.metrics) || !slices.Equal(q.grouping, tc.grouping) || fmt.Sprint(q.selector) != fmt.Sprint(tc.selector) {
			t.Errorf("%s:\n got metrics %v selector %v grouping %v\nwant metrics %v selector %v grouping %v",
				tc.expr, q.metrics, q.selector, q.grouping, tc.metrics, tc.selector, tc.grouping)
		}
	}
	for _, bad := range []string{
		`sum(rate(x[5m])`,          // unbalanced
		`rate(x[5m]))`,             // unbalanced
		`rates(x[5m])`,             // no such function
		`x{job="a"`,                // unterminated selector
		`x{job}`,                   // matcher without operator
		`x{job=a}`,                 // unquoted value
		`{__name__="x"}`,           // no metric name: unchecked, so refused
		`sum by x (y)`,             // by without a list
		`rate(x[$__rate_interval)`, // unterminated range
		`x > $threshold`,           // variable outside a string
		`x{a="b}`,                  // unterminated string
	} {
		if q, err := promqlRefs(bad); err == nil {
			t.Errorf("%s: no error (got %+v)", bad, q)
		}
	}
}
