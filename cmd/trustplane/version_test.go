package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/api"
)

// TestVersionString: `trustplane version` names the release from VERSION
// first (the image's test and operators read "trustplane v<release>"),
// then the Kubernetes API level /version serves.
func TestVersionString(t *testing.T) {
	got := versionString()
	if want := "trustplane v" + trustplane.Release() + " ("; !strings.HasPrefix(got, want) {
		t.Fatalf("trustplane version prints %q, want it to start with %q", got, want)
	}
	if kube := strings.TrimSuffix(api.Version.GitVersion, "+trustplane"); !strings.Contains(got, "Kubernetes "+kube+",") {
		t.Fatalf("trustplane version prints %q, without the API level %s", got, kube)
	}
	for _, f := range trustplane.Formats() {
		if want := fmt.Sprintf("%s %d", f.Name, f.Version); !strings.Contains(got, want) {
			t.Fatalf("trustplane version prints %q, without the format %q", got, want)
		}
	}
}
