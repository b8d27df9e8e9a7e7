package e2e_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlCreateReviews: kubectl creates reviews from files with its
// default (strict) validation. Their kinds take POST only, so kubectl
// validates them on the client against /openapi/v2.
func TestKubectlCreateReviews(t *testing.T) {
	n := startNode(t)
	dir := t.TempDir()
	cases := []struct{ file, body, want string }{
		{"ssar.yaml", "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectAccessReview\nspec:\n  resourceAttributes:\n    verb: list\n    resource: secrets\n    namespace: default\n", "allowed: true"},
		{"ssr.yaml", "apiVersion: authentication.k8s.io/v1\nkind: SelfSubjectReview\n", "username: " + n.whoami(t).Username},
		{"tr.yaml", "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: not-a-token\n", "error: invalid bearer token"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.file)
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := n.kubectl("create", "-f", p, "-o", "yaml")
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("kubectl create -f %s: %v\n%s", c.file, err, out)
		}
	}
	// Client-side validation against the v2 schemas refuses an unknown field.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  tokn: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := n.kubectl("create", "-f", bad); err == nil || !strings.Contains(out, "tokn") {
		t.Errorf("kubectl create -f with an unknown field: %v\n%s", err, out)
	}
	// The document is served as JSON and as kube's protobuf.
	for _, accept := range []string{"application/json", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"} {
		r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openapi/v2", map[string]string{"Accept": accept}, nil)
		if r.code != http.StatusOK || len(r.body) == 0 {
			t.Errorf("GET /openapi/v2 as %s: %d", accept, r.code)
		}
	}
}
