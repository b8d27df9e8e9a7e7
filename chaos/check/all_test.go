package check

import (
	"testing"
)

func TestBaseHistoryPassesEveryChecker(t *testing.T) {
	results, vis := All(baseHistory(), DefaultOptions())
	if len(results) != 7 {
		t.Fatalf("want 7 results, got %d", len(results))
	}
	for _, r := range results {
		if !r.OK {
			t.Errorf("%s: %q info %q", r, r.Violations, r.Info)
		}
	}
	if vis != nil {
		t.Errorf("a passing run has no visualisation")
	}
}
