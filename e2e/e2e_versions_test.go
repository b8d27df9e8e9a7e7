package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// removedVersions are the specification's table of removed API versions,
// the rows of the groups this server serves: each path answers 404 on a
// default node, and still does with --runtime-config api/all=true, since
// no code serves them.
var removedVersions = []struct {
	release, method, path string
}{
	{"1.22", http.MethodPost, "/apis/authentication.k8s.io/v1beta1/tokenreviews"},
	{"1.22", http.MethodPost, "/apis/authorization.k8s.io/v1beta1/subjectaccessreviews"},
	{"1.22", http.MethodPost, "/apis/authorization.k8s.io/v1beta1/selfsubjectaccessreviews"},
	{"1.22", http.MethodPost, "/apis/authorization.k8s.io/v1beta1/selfsubjectrulesreviews"},
	{"1.22", http.MethodPost, "/apis/authorization.k8s.io/v1beta1/namespaces/default/localsubjectaccessreviews"},
	{"1.22", http.MethodGet, "/apis/certificates.k8s.io/v1beta1/certificatesigningrequests"},
	{"1.22", http.MethodGet, "/apis/coordination.k8s.io/v1beta1/namespaces/default/leases"},
	{"1.22", http.MethodGet, "/apis/rbac.authorization.k8s.io/v1beta1/clusterroles"},
	{"1.22", http.MethodGet, "/apis/rbac.authorization.k8s.io/v1beta1/clusterrolebindings"},
	{"1.22", http.MethodGet, "/apis/rbac.authorization.k8s.io/v1beta1/namespaces/default/roles"},
	{"1.22", http.MethodGet, "/apis/rbac.authorization.k8s.io/v1beta1/namespaces/default/rolebindings"},
	{"1.22", http.MethodGet, "/apis/apiextensions.k8s.io/v1beta1/customresourcedefinitions"},
	{"1.22", http.MethodGet, "/apis/admissionregistration.k8s.io/v1beta1/validatingwebhookconfigurations"},
	{"1.25", http.MethodGet, "/apis/events.k8s.io/v1beta1/namespaces/default/events"},
	// Not in the table: kube's lifecycle removes v1alpha1 SelfSubjectReview
	// in 1.32 and v1beta1 in 1.33, the release this server reports.
	{"1.32", http.MethodPost, "/apis/authentication.k8s.io/v1alpha1/selfsubjectreviews"},
	{"1.33", http.MethodPost, "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews"},
}

// TestE2EVersions checks --runtime-config and --feature-gates: the removed
// versions, a version turned off (gone from discovery and OpenAPI too), a
// removed version turned back on, and the gates this server honours.
func TestE2EVersions(t *testing.T) {
	def := startNode(t)
	def.trustplaneOnly(t, "runtime-config and feature gates")
	conf := startNode(t,
		"--runtime-config", "api/all=true,authentication.k8s.io/v1beta1=true,rbac.authorization.k8s.io/v1=false",
		"--feature-gates", "WatchList=false,APIResponseCompression=false")
	ctx := context.Background()

	for _, n := range []*node{def, conf} {
		for _, row := range removedVersions {
			if row.release == "1.33" && n == conf {
				continue // turned back on below
			}
			r := do(t, n.httpClient(), row.method, n.url()+row.path, jsonHeader("application/json"), []byte(`{}`))
			if r.code != http.StatusNotFound {
				t.Errorf("%s %s (removed in %s), node %s: %d %s", row.method, row.path, row.release, strings.Join(n.args, " "), r.code, r.body)
			}
		}
	}
	discovered := func(n *node, gv string) bool {
		r := do(t, n.httpClient(), http.MethodGet, n.url()+"/apis", nil, nil)
		var list metav1.APIGroupList
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatalf("/apis: %v: %s", err, r.body)
		}
		for _, g := range list.Groups {
			for _, v := range g.Versions {
				if v.GroupVersion == gv {
					return true
				}
			}
		}
		return false
	}
	inOpenAPI := func(n *node, gv string) bool {
		r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openapi/v3", nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("/openapi/v3: %d %s", r.code, r.body)
		}
		return strings.Contains(string(r.body), `"apis/`+gv+`"`)
	}

	t.Run("a removed version is off by default and on when named", func(t *testing.T) {
		if discovered(def, "authentication.k8s.io/v1beta1") {
			t.Error("a default node lists authentication.k8s.io/v1beta1")
		}
		r := do(t, conf.httpClient(), http.MethodPost, conf.url()+"/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
			jsonHeader("application/json"), []byte(`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"SelfSubjectReview"}`))
		if r.code != http.StatusCreated {
			t.Fatalf("v1beta1 SelfSubjectReview with authentication.k8s.io/v1beta1=true: %d %s", r.code, r.body)
		}
		if got, want := r.header.Get("Warning"), `299 - "authentication.k8s.io/v1beta1 SelfSubjectReview is deprecated in v1.30+, unavailable in v1.33+"`; got != want {
			t.Errorf("Warning %q, want %q", got, want)
		}
		if !discovered(conf, "authentication.k8s.io/v1beta1") {
			t.Error("authentication.k8s.io/v1beta1=true: not in discovery")
		}
	})

	t.Run("a version turned off answers 404 and leaves discovery and OpenAPI", func(t *testing.T) {
		const gv = "rbac.authorization.k8s.io/v1"
		if !discovered(def, gv) || !inOpenAPI(def, gv) {
			t.Fatalf("a default node does not serve %s", gv)
		}
		if discovered(conf, gv) || inOpenAPI(conf, gv) {
			t.Errorf("%s=false: still in discovery or OpenAPI", gv)
		}
		r := do(t, conf.httpClient(), http.MethodGet, conf.url()+"/apis/"+gv+"/clusterroles", nil, nil)
		if r.code != http.StatusNotFound {
			t.Errorf("GET clusterroles with %s=false: %d %s", gv, r.code, r.body)
		}
		// kubectl's discovery (aggregated) agrees.
		if out, err := conf.kubectl("api-resources", "--api-group=rbac.authorization.k8s.io", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("kubectl api-resources --api-group=rbac.authorization.k8s.io: %q %v", out, err)
		}
		// The RBAC policy is still in force: the server reads its storage.
		u := conf.userClientset(t, "nobody")
		if _, err := u.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); err == nil {
			t.Error("a user without bindings lists secrets with RBAC's API turned off")
		}
	})

	t.Run("ClusterTrustBundles follow their version, the gate with it", func(t *testing.T) {
		// api/all=true enables certificates.k8s.io/v1beta1, and
		// --feature-gates does not name the gate: the specification
		// serves the version (docs/COMPATIBILITY.md).
		r := do(t, conf.httpClient(), http.MethodGet, conf.url()+"/apis/certificates.k8s.io/v1beta1/clustertrustbundles", nil, nil)
		if r.code != http.StatusOK {
			t.Errorf("bundles with their version enabled: %d %s", r.code, r.body)
		}
		if r := do(t, def.httpClient(), http.MethodGet, def.url()+"/apis/certificates.k8s.io/v1beta1/clustertrustbundles", nil, nil); r.code != http.StatusNotFound {
			t.Errorf("bundles on a default node: %d %s", r.code, r.body)
		}
	})

	t.Run("WatchList=false refuses sendInitialEvents", func(t *testing.T) {
		const q = "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
		r := do(t, conf.httpClient(), http.MethodGet, conf.url()+q, nil, nil)
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "")
		if !strings.Contains(string(r.body), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled") {
			t.Errorf("body %s", r.body)
		}
		if r := do(t, def.httpClient(), http.MethodGet, def.url()+q, nil, nil); r.code != http.StatusOK {
			t.Errorf("a default node refuses a streaming list: %d %s", r.code, r.body)
		}
	})

	t.Run("APIResponseCompression=false sends large lists uncompressed", func(t *testing.T) {
		for _, n := range []*node{def, conf} {
			for _, name := range []string{"big-1", "big-2", "big-3"} {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": strings.Repeat("x", 60<<10)}}
				if _, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		encoding := func(n *node) string {
			r := do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1/namespaces/default/configmaps", map[string]string{"Accept-Encoding": "gzip"}, nil)
			if r.code != http.StatusOK {
				t.Fatalf("list: %d", r.code)
			}
			return r.header.Get("Content-Encoding")
		}
		if got := encoding(def); got != "gzip" {
			t.Errorf("a default node: Content-Encoding %q, want gzip", got)
		}
		if got := encoding(conf); got != "" {
			t.Errorf("APIResponseCompression=false: Content-Encoding %q", got)
		}
	})
}
