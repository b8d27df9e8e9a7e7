package registry

import (
	"testing"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/library"
)

// TestCostUnits pins the cost units of CEL expressions, estimated (what a
// write is refused by) and at run time (what the runtime budget counts),
// against kube's environment and estimator, which trustplane uses
// unchanged. The specification's units differ in two places, recorded in
// docs/COMPATIBILITY.md: a list literal's base cost is CEL's 10 (40 is a
// message literal's), and a regular expression costs
// ceil(0.1×(1+len(input))) × ceil(0.25×len(regex)), which grows as the
// product of the two lengths, as the specification's length × length
// does, in kube's smaller unit.
func TestCostUnits(t *testing.T) {
	env, err := costEnv()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, expr string
		want       uint64 // both estimated and actual
	}{
		{"a comparison costs 1", "1 < 2", 1},
		{"two comparisons cost 2", "1 < 2 && 3 > 2", 2},
		{"a string comparison costs 1 for short strings", "'a' == 'b'", 1},
		// The literal, its element's comparison, size and the comparison.
		{"a list literal's base cost is 10", "size([1 < 2]) == 1", 10 + 1 + 1 + 1},
		{"and its elements' costs", "size([1 < 2, 3 > 2]) == 2", 10 + 2 + 1 + 1},
		{"a map literal's base cost is 30", "size({'a': 1 < 2}) == 1", 30 + 1 + 1 + 1},
		{"a regex over 10 characters of input, 8 of pattern", "'aaaaaaaaaa'.matches('a+b+c+d+')", 2 * 2},
		{"four times the input", "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'.matches('a+b+c+d+')", 5 * 2},
		{"four times the input and the pattern", "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'.matches('a+b+c+d+e+f+g+h+i+j+k+l+m+n+o+p+')", 5 * 8},
		// Comparing with an empty string traverses nothing: 0.
		{"find is priced as matches", "'aaaaaaaaaa'.find('a+b+c+d+') == ''", 2 * 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			est, ok := estimatedCost(c.expr)
			if !ok || est != c.want {
				t.Errorf("estimated cost %d (finite %v), want %d", est, ok, c.want)
			}
			ast, issues := env.Compile(c.expr)
			if issues.Err() != nil {
				t.Fatal(issues.Err())
			}
			prog, err := env.Program(ast, cel.CostTracking(&library.CostEstimator{}))
			if err != nil {
				t.Fatal(err)
			}
			_, details, err := prog.Eval(cel.NoVars())
			if err != nil {
				t.Fatal(err)
			}
			if got := *details.ActualCost(); got != c.want {
				t.Errorf("actual cost %d, want %d", got, c.want)
			}
		})
	}
}
