package chart

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelmInstallsIntoTrustplane: Helm, a client nobody here wrote,
// installs, upgrades, rolls back and uninstalls a chart with a
// CustomResourceDefinition, one of its objects, RBAC, a ServiceAccount, a
// Secret and ConfigMaps into a real trustplane node. Helm validates the
// manifests against the node's OpenAPI, applies its three-way merge
// patches, and keeps its releases in Secrets of the node.
func TestHelmInstallsIntoTrustplane(t *testing.T) {
	kubeconfig := startTrustplane(t)
	chart := filepath.Join("testdata", "fleet-app")
	h := func(args ...string) string {
		t.Helper()
		out, stderr, err := helm(t, append(args, "--kubeconfig", kubeconfig)...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}
	get := func(args ...string) (string, error) {
		return kubectl(t, kubeconfig, append([]string{"-n", "apps"}, args...)...)
	}
	want := func(what string, args ...string) {
		t.Helper()
		out, err := get(args...)
		if err != nil || strings.TrimSpace(out) != what {
			t.Fatalf("kubectl %s: %q (%v), want %q", strings.Join(args, " "), out, err, what)
		}
	}

	h("install", "app", chart, "-n", "apps", "--create-namespace")
	want("one", "get", "configmap", "app-settings", "-o", "jsonpath={.data.message}")
	want("czNjcmV0LW9uZQ==", "get", "secret", "app-credentials", "-o", "jsonpath={.data.password}")
	want("one", "get", "widget", "app-widget", "-o", "jsonpath={.spec.message}")
	want("app-worker", "get", "serviceaccount", "app-worker", "-o", "jsonpath={.metadata.name}")
	want("app-reader", "get", "rolebinding", "app-reader", "-o", "jsonpath={.roleRef.name}")
	want("yes", "get", "configmap", "app-extra", "-o", "jsonpath={.data.present}")
	// The release is a Secret of helm's type in the node.
	want("helm.sh/release.v1", "get", "secret", "sh.helm.release.v1.app.v1", "-o", "jsonpath={.type}")
	// The worker's RBAC works: it may list widgets, not Secrets.
	want("yes", "auth", "can-i", "list", "widgets.fleet.example.com", "--as", "system:serviceaccount:apps:app-worker")
	if out, _ := get("auth", "can-i", "list", "secrets", "--as", "system:serviceaccount:apps:app-worker"); strings.TrimSpace(out) != "no" {
		t.Fatalf("the worker may list Secrets: %q", out)
	}

	// An upgrade patches what changed and deletes what the chart dropped.
	h("upgrade", "app", chart, "-n", "apps", "--set", "message=two,password=s3cret-two,extra=false,replicas=3")
	want("two", "get", "configmap", "app-settings", "-o", "jsonpath={.data.message}")
	want("czNjcmV0LXR3bw==", "get", "secret", "app-credentials", "-o", "jsonpath={.data.password}")
	want("3", "get", "widget", "app-widget", "-o", "jsonpath={.spec.replicas}")
	if out, err := get("get", "configmap", "app-extra"); err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("a dropped ConfigMap is still there: %v\n%s", err, out)
	}
	// A value the CRD's schema refuses fails the upgrade and changes nothing.
	if out, stderr, err := helm(t, "upgrade", "app", chart, "-n", "apps", "--set", "replicas=-1", "--kubeconfig", kubeconfig); err == nil {
		t.Fatalf("an upgrade with a widget the schema refuses succeeded:\n%s%s", out, stderr)
	}
	want("3", "get", "widget", "app-widget", "-o", "jsonpath={.spec.replicas}")

	// A rollback to the first revision restores it, the dropped ConfigMap too.
	h("rollback", "app", "1", "-n", "apps")
	want("one", "get", "configmap", "app-settings", "-o", "jsonpath={.data.message}")
	want("yes", "get", "configmap", "app-extra", "-o", "jsonpath={.data.present}")
	if out := h("history", "app", "-n", "apps"); !strings.Contains(out, "Rollback to 1") {
		t.Fatalf("history:\n%s", out)
	}

	// Uninstall removes the release's objects; the CRD stays, as helm
	// leaves crds/ alone.
	h("uninstall", "app", "-n", "apps")
	for _, obj := range []string{"configmap/app-settings", "secret/app-credentials", "widget/app-widget", "serviceaccount/app-worker", "role/app-reader"} {
		waitUntil(t, 30*time.Second, obj+" to be deleted", func() bool {
			out, err := get("get", obj)
			return err != nil && strings.Contains(out, "NotFound")
		})
	}
	want("widgets.fleet.example.com", "get", "crd", "widgets.fleet.example.com", "-o", "jsonpath={.metadata.name}")
}

// startTrustplane starts one node on free loopback ports, waits until it
// is ready and returns its admin kubeconfig; the process is killed when
// the test ends.
func startTrustplane(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	listen, raft := freeAddr(t), freeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(trustplaneBin, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", listen, "--raft-addr", raft)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			t.Logf("node log:\n%s", tail(logf.Name()))
		}
	})
	kubeconfig := filepath.Join(dir, "data", "admin.kubeconfig")
	waitUntil(t, 60*time.Second, "the node to be ready", func() bool {
		if _, err := os.Stat(kubeconfig); err != nil {
			return false
		}
		// The default ServiceAccount shows the controllers run too.
		out, err := kubectl(t, kubeconfig, "get", "serviceaccount", "default", "-n", "default", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "serviceaccount/default"
	})
	return kubeconfig
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
