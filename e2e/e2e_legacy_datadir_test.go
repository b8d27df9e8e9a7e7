package e2e_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// legacyDataDir is a one-node data directory written by the build before
// key spaces (de1512c; scripts/legacy-datadir.sh made it). Its raft
// snapshot (index 172) holds namespace legacy, ConfigMap cm (resourceVersion
// 153), the definition widgets.example.com and widget w1 (165), the first
// signing key and a token it signed; definitions an attacker could then
// store, clusterroles.rbac.authorization.k8s.io (v9) and
// signingkeys.trustplane.internal; and ServiceAccount legacy. Its log
// after the snapshot holds a rotated signing key and a token it signed,
// widget w2 (180) and ConfigMap cm2 (181). The tokens are in the
// directory (token, token2), valid for ten years from 2026-11-28.
const legacyDataDir = "testdata/legacy-datadir-de1512c.tar.gz"

// TestE2ELegacyDataDir: a data directory written before key spaces is
// served by this build with nothing lost: the snapshot and the log are
// classified on restore and replay (custom objects into the custom key
// space, signing keys into the internal one), every object keeps its
// resourceVersion, tokens signed by both keys verify, and the definitions
// the rules now refuse are not served, carry a Refused condition saying
// why, and can be deleted without deleting a built-in object.
func TestE2ELegacyDataDir(t *testing.T) {
	dir := t.TempDir()
	untar(t, legacyDataDir, dir)
	n := &node{t: t, name: "legacy", dir: filepath.Join(dir, "data"), listen: freePort(t), raftAddr: freePort(t)}
	n.needsProcess("a data directory of its own")
	n.start()
	t.Cleanup(n.kill)
	n.waitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := n.clientset()

	for name, rv := range map[string]string{"cm": "153", "cm2": "181"} {
		cm, err := cs.CoreV1().ConfigMaps("legacy").Get(ctx, name, metav1.GetOptions{})
		if err != nil || cm.ResourceVersion != rv {
			t.Fatalf("configmap %s: %v %v, want resourceVersion %s", name, cm, err, rv)
		}
	}
	widgets := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("legacy")
	var list *unstructured.UnstructuredList
	waitFor(t, 60*time.Second, "widgets served", func() bool {
		var err error
		list, err = widgets.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	got := map[string]string{}
	for _, w := range list.Items {
		got[w.GetName()] = w.GetResourceVersion()
	}
	if got["w1"] != "165" || got["w2"] != "180" || len(got) != 2 {
		t.Fatalf("widgets after the upgrade: %v, want w1 at 165 and w2 at 180", got)
	}
	w3 := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w3"}, "spec": map[string]any{"size": int64(5)}}}
	if _, err := widgets.Create(ctx, w3, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a new widget: %v", err)
	}

	// Both signing keys came through (the first from the snapshot, the
	// second from the log), and a new token verifies too.
	for _, f := range []string{"token", "token2"} {
		tok, err := os.ReadFile(filepath.Join(n.dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if expired(t, string(tok)) {
			t.Logf("%s expired; its review is not checked", f)
			continue
		}
		rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: strings.TrimSpace(string(tok))}}, metav1.CreateOptions{})
		if err != nil || !rev.Status.Authenticated || rev.Status.User.Username != "system:serviceaccount:legacy:legacy" {
			t.Fatalf("%s signed before the upgrade: %+v %v", f, rev.Status, err)
		}
	}
	fresh, err := cs.CoreV1().ServiceAccounts("legacy").CreateToken(ctx, "legacy", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: fresh.Status.Token}}, metav1.CreateOptions{}); err != nil || !rev.Status.Authenticated {
		t.Fatalf("a token signed after the upgrade: %+v %v", rev, err)
	}

	// The definitions the rules refuse: not served, Refused says why.
	roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"clusterroles.rbac.authorization.k8s.io", "the group has built-in resources of this server"},
		{"signingkeys.trustplane.internal", "the group trustplane.internal and the groups under it are reserved for trustplane"},
	} {
		waitFor(t, 60*time.Second, tc.name+" Refused", func() bool {
			out, err := n.kubectl("get", "crd", tc.name, "-o", `jsonpath={.status.conditions[?(@.type=="Refused")].message}`)
			return err == nil && strings.Contains(out, tc.want)
		})
	}
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/apis/rbac.authorization.k8s.io/v9/clusterroles", nil, nil)
	if r.code != http.StatusNotFound {
		t.Fatalf("the refused definition's version is served: %d %s", r.code, r.body)
	}
	r = do(t, n.httpClient(), http.MethodGet, n.url()+"/apis/trustplane.internal/v1/signingkeys", nil, nil)
	if r.code != http.StatusNotFound || strings.Contains(string(r.body), "BEGIN") {
		t.Fatalf("the signing keys are served: %d %s", r.code, r.body)
	}
	for _, name := range []string{"clusterroles.rbac.authorization.k8s.io", "signingkeys.trustplane.internal"} {
		n.mustKubectl("delete", "crd", name, "--timeout=60s")
		if _, err := n.kubectl("get", "crd", name); err == nil {
			t.Fatalf("%s is still there after its deletion", name)
		}
	}
	after, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil || len(after.Items) != len(roles.Items) {
		t.Fatalf("ClusterRoles after deleting the refused definition: %d (%v), want %d", len(after.Items), err, len(roles.Items))
	}
	if rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: fresh.Status.Token}}, metav1.CreateOptions{}); err != nil || !rev.Status.Authenticated {
		t.Fatalf("a token after deleting signingkeys.trustplane.internal: %+v %v", rev, err)
	}

	// And all of it again after a restart, from the log this build wrote.
	n.stop()
	n.start()
	n.waitReady(60 * time.Second)
	waitFor(t, 60*time.Second, "widgets served after a restart", func() bool {
		l, err := widgets.List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 3
	})
	if _, err := n.clientset().CoreV1().ConfigMaps("legacy").Get(ctx, "cm", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(ctx, "signingkeys.trustplane.internal", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a deleted definition is back: %v", err)
	}
}

// expired reports whether a JWT's exp has passed.
func expired(t *testing.T, jwt string) bool {
	parts := strings.Split(strings.TrimSpace(jwt), ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", jwt)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	return time.Now().Unix() >= claims.Exp
}

// untar unpacks the gzipped tar file into dir.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("%s leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		}
	}
}
