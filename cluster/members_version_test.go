package cluster

import (
	"strings"
	"testing"
)

// TestReportedVersion: a peer's reported release is shown as it is when
// it is made of a semantic version's characters, and as "invalid" when it
// carries anything else (control characters, spaces) or is too long.
func TestReportedVersion(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"v0.1.0-dev", "v0.1.0-dev"},
		{"v0.1.0-dev+0598eec335d5-dirty", "v0.1.0-dev+0598eec335d5-dirty"},
		{"v1\x1b[2J", "invalid"},
		{"v1 (evil)", "invalid"},
		{"v1\nNAME", "invalid"},
		{strings.Repeat("1", maxVersionLen), strings.Repeat("1", maxVersionLen)},
		{strings.Repeat("1", maxVersionLen+1), "invalid"},
	} {
		if got := reportedVersion(c.in); got != c.want {
			t.Errorf("reportedVersion(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
