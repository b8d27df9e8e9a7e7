package e2e_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/trustplane/trustplane"
)

// TestHealth checks the health endpoints, /version and the 401 for
// everything else when no credentials are presented.
func TestHealth(t *testing.T) {
	n := startNode(t)
	anon := n.anonClient()
	get := func(t *testing.T, path string) httpResult {
		t.Helper()
		return do(t, anon, http.MethodGet, n.url()+path, nil, nil)
	}

	t.Run("plain", func(t *testing.T) {
		for _, p := range []string{"/livez", "/readyz", "/healthz", "/livez/ping", "/readyz/ping", "/healthz/ping"} {
			r := get(t, p)
			if strings.Count(p, "/") > 1 && !n.isTrustplane() {
				// kube-apiserver lets anonymous requests have the
				// three paths only (system:public-info-viewer), not
				// one check's; trustplane serves those without
				// credentials too (docs/COMPATIBILITY.md).
				r = do(t, n.httpClient(), http.MethodGet, n.url()+p, nil, nil)
			}
			if r.code != 200 || string(r.body) != "ok" {
				t.Errorf("%s: %d %q", p, r.code, r.body)
			}
		}
	})

	t.Run("verbose", func(t *testing.T) {
		for _, ep := range []string{"livez", "readyz", "healthz"} {
			r := get(t, "/"+ep+"?verbose")
			body := strings.TrimSpace(string(r.body))
			lines := strings.Split(body, "\n")
			if r.code != 200 || lines[len(lines)-1] != ep+" check passed" {
				t.Fatalf("/%s?verbose: %d %q", ep, r.code, body)
			}
			if lines[0] != "[+]ping ok" {
				t.Fatalf("/%s?verbose first check %q", ep, lines[0])
			}
			// Deprecated in documentation only, as in kube (COMPATIBILITY).
			if w := r.header.Get("Warning"); w != "" {
				t.Fatalf("/%s?verbose warns %q", ep, w)
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "[+]") || !strings.HasSuffix(l, " ok") {
					t.Fatalf("/%s?verbose line %q", ep, l)
				}
			}
		}
		r := get(t, "/readyz?verbose")
		checks := []string{"[+]ping ok"}
		if n.isTrustplane() {
			checks = append(checks, "[+]poststarthook/bootstrap ok") // trustplane's own check
		}
		for _, check := range checks {
			if !strings.Contains(string(r.body), check+"\n") {
				t.Errorf("/readyz?verbose lacks %q:\n%s", check, r.body)
			}
		}
	})

	t.Run("exclude", func(t *testing.T) {
		for _, ep := range []string{"livez", "readyz"} {
			r := get(t, "/"+ep+"?exclude=ping&verbose")
			if r.code != 200 || !strings.Contains(string(r.body), "[+]ping excluded: ok\n") || !strings.HasSuffix(strings.TrimSpace(string(r.body)), ep+" check passed") {
				t.Fatalf("/%s?exclude=ping&verbose: %d %q", ep, r.code, r.body)
			}
		}
		// Excluding a check that does not exist is reported, not an error.
		r := get(t, "/readyz?exclude=nothing&verbose")
		if r.code != 200 || !strings.Contains(string(r.body), "warn: some health checks cannot be excluded: no matches for \"nothing\"") {
			t.Fatalf("/readyz?exclude=nothing: %d %q", r.code, r.body)
		}
	})

	t.Run("version", func(t *testing.T) {
		r := get(t, "/version")
		var v version.Info
		if err := json.Unmarshal(r.body, &v); err != nil || r.code != 200 {
			t.Fatalf("/version: %d %v %s", r.code, err, r.body)
		}
		if v.Major != "1" || v.Minor != "33" || !strings.HasPrefix(v.GitVersion, "v1.33.") || v.Platform == "" {
			t.Fatalf("/version: %+v", v)
		}
		if sv, err := n.clientset().Discovery().ServerVersion(); err != nil || sv.GitVersion != v.GitVersion {
			t.Fatalf("client-go ServerVersion: %v %+v", err, sv)
		}
		// Beside kube's fields: the release and the formats the node writes.
		var ours struct {
			Trustplane struct {
				Release string
				Formats []trustplane.Format
			}
		}
		if err := json.Unmarshal(r.body, &ours); err != nil || ours.Trustplane.Release != trustplane.Release() || !reflect.DeepEqual(ours.Trustplane.Formats, trustplane.Formats()) {
			t.Fatalf("/version's trustplane release and formats: %v %s", err, r.body)
		}
	})

	t.Run("401 without credentials", func(t *testing.T) {
		n.trustplaneOnly(t, "no anonymous user: 401 where kube-apiserver with --anonymous-auth (its default) answers 403 for system:anonymous")
		for _, p := range []string{"/api/v1/namespaces", "/api/v1/namespaces/default/serviceaccounts", "/api", "/apis", "/api/v1", "/nothing"} {
			r := get(t, p)
			st := wantStatus(t, r, 401, metav1.StatusReasonUnauthorized, "Unauthorized")
			if st.Details != nil && (st.Details.Name != "" || len(st.Details.Causes) > 0) {
				t.Fatalf("%s: details %+v", p, st.Details)
			}
		}
	})
}
