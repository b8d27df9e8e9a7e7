package check

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
)

// Errors of this package.
var (
	// ErrNoVisual: WriteHTML was called on a nil Visual (no violation, so
	// nothing to draw).
	ErrNoVisual = errors.New("check: no linearizability violation to visualise")
)

// MaxViolations is how many violations a Result keeps; the rest are
// counted in Dropped.
const MaxViolations = 20

// Result is what one checker found.
type Result struct {
	// Name is the checker: "outcomes", "linearizability", "watch",
	// "convergence", "csr", "staleness" or "tokens".
	Name string
	// OK is true only when the checker ran and found nothing wrong.
	OK bool
	// Skipped, when non-empty, says why the checker could not decide
	// (no CSR ops; porcupine timed out: "inconclusive: ...").
	Skipped string
	// Violations are human-readable, each naming the op IDs, nodes and
	// RVs involved; at most MaxViolations are kept.
	Violations []string
	// Dropped counts violations beyond MaxViolations.
	Dropped int
	// Info are short notes that are not violations (how many Unknown
	// writes resolved each way, sessions that ended gone, ...).
	Info []string
}

// String is a one-line summary.
func (r Result) String() string {
	switch {
	case r.Skipped != "":
		return fmt.Sprintf("%s: SKIPPED (%s)", r.Name, r.Skipped)
	case r.OK:
		return fmt.Sprintf("%s: OK", r.Name)
	default:
		return fmt.Sprintf("%s: FAIL (%d violations)", r.Name, len(r.Violations)+r.Dropped)
	}
}

// Options tune All; a zero field takes its DefaultOptions value.
type Options struct {
	// LinearizabilityTimeout bounds porcupine's search over all keys.
	LinearizabilityTimeout time.Duration
	// StaleSlack is added to the history's MaxStaleRead for apply lag.
	StaleSlack time.Duration
}

// DefaultOptions: one minute for porcupine, one second of slack.
func DefaultOptions() Options {
	return Options{LinearizabilityTimeout: time.Minute, StaleSlack: time.Second}
}

// All runs every checker, in a fixed order. The Visual is non-nil only
// when linearizability found a violation.
func All(h *history.History, opts Options) ([]Result, *Visual) {
	d := DefaultOptions()
	if opts.LinearizabilityTimeout <= 0 {
		opts.LinearizabilityTimeout = d.LinearizabilityTimeout
	}
	if opts.StaleSlack <= 0 {
		opts.StaleSlack = d.StaleSlack
	}
	lin, vis := Linearizability(h, opts.LinearizabilityTimeout)
	return []Result{
		Outcomes(h),
		lin,
		Watch(h),
		Convergence(h),
		CSRs(h),
		Staleness(h, opts.StaleSlack),
		Tokens(h),
	}, vis
}

// collector fills a Result, capping violations.
type collector struct{ r Result }

func newCollector(name string) *collector { return &collector{r: Result{Name: name}} }

func (c *collector) violate(format string, args ...any) {
	if len(c.r.Violations) >= MaxViolations {
		c.r.Dropped++
		return
	}
	c.r.Violations = append(c.r.Violations, fmt.Sprintf(format, args...))
}

func (c *collector) info(format string, args ...any) {
	c.r.Info = append(c.r.Info, fmt.Sprintf(format, args...))
}

func (c *collector) skip(why string) Result {
	c.r.Skipped = why
	c.r.OK = false
	return c.r
}

func (c *collector) result() Result {
	c.r.OK = len(c.r.Violations) == 0 && c.r.Dropped == 0 && c.r.Skipped == ""
	return c.r
}

// endOf is a time after every operation: Unknown writes "return" there.
func endOf(h *history.History) int64 {
	end := h.End
	for i := range h.Ops {
		if h.Ops[i].Return > end {
			end = h.Ops[i].Return
		}
	}
	return end + 1
}

// isConfigMapWrite: a create, update or delete of a ConfigMap key.
func isConfigMapWrite(k history.Kind) bool {
	return k == history.Create || k == history.Update || k == history.Delete
}

// readOK reports whether a read has an answer worth checking. A get answered
// 404 counts as an OK "does not exist".
func readOK(op *history.Op) bool {
	if op.Outcome == history.OK {
		return true
	}
	return op.Kind == history.Get && op.Outcome == history.Fail && op.Code == 404
}

// liveNodes are the nodes whose final state could be read, in order.
func liveNodes(h *history.History) []string {
	var out []string
	for _, n := range nodesOf(h) {
		if st, ok := h.Final[n]; ok && st.Err == "" {
			out = append(out, n)
		}
	}
	return out
}

// nodesOf is h.Nodes, or the final states' nodes sorted when Nodes is empty.
func nodesOf(h *history.History) []string {
	if len(h.Nodes) > 0 {
		return h.Nodes
	}
	var out []string
	for n := range h.Final {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func quoteAt(v string, rv uint64) string { return fmt.Sprintf("%q@%d", v, rv) }
