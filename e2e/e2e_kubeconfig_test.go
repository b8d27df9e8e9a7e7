package e2e_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// runBin runs the trustplane binary with args and env added to the test's
// environment, and returns its stdout, stderr and error.
func runBin(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestKubeconfigCommand: `trustplane kubeconfig` prints the node's admin
// kubeconfig with the server replaced, and kubectl works with what it
// printed; --data-dir has its TRUSTPLANE_DATA_DIR twin; a data dir without
// a kubeconfig and a URL that is no https URL are refused.
func TestKubeconfigCommand(t *testing.T) {
	n := startNode(t)
	n.needsProcess("read the data directory of")
	_, port, _ := net.SplitHostPort(n.listen)
	server := "https://localhost:" + port // in the serving certificate, unlike the node's 127.0.0.1 URL

	check := func(t *testing.T, out string) {
		t.Helper()
		cfg, err := clientcmd.Load([]byte(out))
		if err != nil {
			t.Fatalf("the output is no kubeconfig: %v", err)
		}
		if len(cfg.Clusters) == 0 {
			t.Fatal("the kubeconfig has no cluster")
		}
		for name, c := range cfg.Clusters {
			if c.Server != server {
				t.Fatalf("cluster %s: server %q, want %q", name, c.Server, server)
			}
		}
		path := filepath.Join(t.TempDir(), "tp.kubeconfig")
		if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectlPath(t), "--kubeconfig", path, "get", "namespace", "default", "-o", "name")
		cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
		got, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(got)) != "namespace/default" {
			t.Fatalf("kubectl with the printed kubeconfig: %v\n%s", err, got)
		}
	}

	t.Run("flag", func(t *testing.T) {
		out, stderr, err := runBin(t, nil, "kubeconfig", "--data-dir", n.dir, "--server", server)
		if err != nil {
			t.Fatalf("trustplane kubeconfig: %v\n%s", err, stderr)
		}
		check(t, out)
	})
	t.Run("environment twin", func(t *testing.T) {
		out, stderr, err := runBin(t, []string{"TRUSTPLANE_DATA_DIR=" + n.dir}, "kubeconfig", "--server", server)
		if err != nil {
			t.Fatalf("trustplane kubeconfig: %v\n%s", err, stderr)
		}
		check(t, out)
	})
	t.Run("without --server the node's own URL stays", func(t *testing.T) {
		out, stderr, err := runBin(t, nil, "kubeconfig", "--data-dir", n.dir)
		if err != nil {
			t.Fatalf("trustplane kubeconfig: %v\n%s", err, stderr)
		}
		want, err := os.ReadFile(n.kubeconfigPath())
		if err != nil {
			t.Fatal(err)
		}
		a, err1 := clientcmd.Load([]byte(out))
		b, err2 := clientcmd.Load(want)
		if err1 != nil || err2 != nil {
			t.Fatalf("loading: %v %v", err1, err2)
		}
		for name, c := range b.Clusters {
			if a.Clusters[name] == nil || a.Clusters[name].Server != c.Server {
				t.Fatalf("cluster %s: printed %+v, file has server %q", name, a.Clusters[name], c.Server)
			}
		}
	})
	t.Run("no kubeconfig yet", func(t *testing.T) {
		out, stderr, err := runBin(t, nil, "kubeconfig", "--data-dir", t.TempDir())
		if err == nil || out != "" || !strings.Contains(stderr, "no admin kubeconfig yet") {
			t.Fatalf("empty data dir: err %v, stdout %q, stderr %q", err, out, stderr)
		}
	})
	t.Run("not an https URL", func(t *testing.T) {
		for _, bad := range []string{"http://127.0.0.1:6443", "127.0.0.1:6443", "https://127.0.0.1:6443/api"} {
			out, stderr, err := runBin(t, nil, "kubeconfig", "--data-dir", n.dir, "--server", bad)
			if err == nil || out != "" || !strings.Contains(stderr, "want https://host:port") {
				t.Fatalf("--server %s: err %v, stdout %q, stderr %q", bad, err, out, stderr)
			}
		}
	})
}
