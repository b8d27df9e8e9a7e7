package trustplane

import (
	"os"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// TestChangelogHasTheRelease: VERSION is a semantic version, and
// CHANGELOG.md has its section: "## 0.1.0 (unreleased)" while VERSION is
// 0.1.0-dev, "## 0.1.0 (2027-01-15)" once it is 0.1.0.
func TestChangelogHasTheRelease(t *testing.T) {
	v, err := utilversion.ParseSemantic(Release())
	if err != nil {
		t.Fatalf("VERSION %q: %v", Release(), err)
	}
	base := strings.TrimSuffix(Release(), "-dev")
	if pre := v.PreRelease(); pre != "" && pre != "dev" {
		t.Fatalf("VERSION %q: the only pre-release is -dev, between releases", Release())
	}
	b, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	var heading string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## "+base+" ") {
			heading = line
			break
		}
	}
	switch {
	case heading == "":
		t.Fatalf("CHANGELOG.md has no section \"## %s ...\" for VERSION %s", base, Release())
	case v.PreRelease() == "dev" && !strings.HasSuffix(heading, "(unreleased)"):
		t.Fatalf("VERSION %s is between releases; its CHANGELOG section %q should say (unreleased)", Release(), heading)
	case v.PreRelease() == "" && strings.HasSuffix(heading, "(unreleased)"):
		t.Fatalf("VERSION %s is a release; its CHANGELOG section %q still says (unreleased)", Release(), heading)
	}
}
