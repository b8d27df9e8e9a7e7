package e2e_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bench"
)

// runBench runs the binary with args, bounded by timeout, and returns
// stdout, stderr and the exit error. Hitting the bound fails the test:
// the command must stop by itself.
func runBench(t *testing.T, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = benchEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("trustplane %s did not stop within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// benchEnv is the test's environment without KUBECONFIG or TRUSTPLANE_*
// variables, which would change what the bench targets.
func benchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "TRUSTPLANE_") {
			env = append(env, kv)
		}
	}
	return env
}

func readBenchResult(t *testing.T, path string) *bench.Result {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := bench.ReadResult(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBench runs every workload of "trustplane bench" with tiny settings
// against a real node: it must exit 0, report every workload with
// operations and no errors, delete its namespaces and CSRs, and compare a
// result with itself as ratios of 1.00.
func TestBench(t *testing.T) {
	n := startNode(t)
	pid := n.pid()
	out := filepath.Join(t.TempDir(), "result.json")
	stdout, stderr, err := runBench(t, 4*time.Minute, "bench", "--kubeconfig", n.kubeconfigPath(),
		"--duration", "1s", "--clients", "3", "--list-size", "200", "--list-page-size", "50",
		"--watchers", "3", "--watch-rate", "50", "--server-pid", strconv.Itoa(pid), "--objects", "30", "--out", out)
	if err != nil {
		t.Fatalf("trustplane bench: %v\nstdout:\n%s\nstderr:\n%s\n%s", err, stdout, stderr, n.logTail())
	}
	res := readBenchResult(t, out)
	env := res.Environment
	if !strings.Contains(env.TrustplaneVersion, "trustplane") || env.Nodes != 1 || env.Clients != 3 ||
		len(env.Endpoints) != 1 || env.Machine.NumCPU < 1 || env.Flags["list-size"] != "200" {
		t.Errorf("environment %+v", env)
	}
	for _, name := range bench.WorkloadNames() {
		w, ok := res.Workload(name)
		if !ok {
			t.Errorf("no result for workload %s", name)
			continue
		}
		if w.Ops == 0 || w.Errors != 0 || w.OpsPerSec <= 0 || w.Latency.P50Ms <= 0 || w.Latency.P99Ms < w.Latency.P50Ms {
			t.Errorf("workload %s: %+v", name, w)
		}
		// The node served every workload for a second: its CPU shows.
		if w.ServerCores <= 0 || w.ServerCPUPerOpMs <= 0 || w.ServerRSSBytes <= 0 {
			t.Errorf("workload %s has no server figures: %+v", name, w)
		}
		if row := fieldsOf(stdout, name); len(row) != 10 {
			t.Errorf("the table's row for %s is %q:\n%s", name, row, stdout)
		}
	}
	if fill, ok := res.Workload("fill"); !ok || fill.Ops != 30 || fill.Errors != 0 || res.Workloads[0].Name != "fill" {
		t.Errorf("fill: %+v, want 30 objects stored first, without errors", fill)
	}
	if res.Server == nil || !slices.Equal(res.Server.PIDs, []int{pid}) || res.Server.PeakRSSBytes < res.Server.RSSBytes || res.Server.RSSBytes <= 0 {
		t.Errorf("server summary %+v, want the node's pid %d and its memory", res.Server, pid)
	}
	if !strings.Contains(stdout, "WORKLOAD") || !strings.Contains(stderr, "bench: run ") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}

	// Cleanup: no namespace or CSR of the run is left.
	cs := n.clientset()
	ctx := context.Background()
	waitFor(t, 60*time.Second, "the bench's namespaces to be deleted", func() bool {
		nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: bench.RunLabel})
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range nss.Items {
			t.Logf("left: namespace %s (%s)", ns.Name, ns.Status.Phase)
		}
		return len(nss.Items) == 0
	})
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, bench.NamespacePrefix) {
			t.Errorf("namespace %s is left", ns.Name)
		}
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs.Items {
		if strings.HasPrefix(c.Name, bench.NamespacePrefix) || c.Labels[bench.RunLabel] != "" {
			t.Errorf("CSR %s is left", c.Name)
		}
	}

	// A plot of the result is an SVG with the run's get line.
	svg := filepath.Join(t.TempDir(), "plot.svg")
	if _, stderr, err := runBench(t, 30*time.Second, "bench", "plot", "--x", "list-size", "--y", "get:p50", "--y", "get:p99", "--out", svg, out); err != nil {
		t.Fatalf("bench plot: %v\n%s", err, stderr)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.HasPrefix(string(b), "<svg") || !strings.Contains(string(b), "get:p99 — trustplane, 1 node(s)") {
		t.Errorf("plot: %v\n%s", err, b)
	}

	// Compared with itself, every ratio is 1.00.
	cmp, stderr, err := runBench(t, 30*time.Second, "bench", "compare", out, out)
	if err != nil {
		t.Fatalf("bench compare: %v\n%s", err, stderr)
	}
	for _, name := range bench.WorkloadNames() {
		if row := fieldsOf(cmp, name); len(row) != 13 || row[3] != "1.00" || row[6] != "1.00" || row[9] != "1.00" || row[12] != "1.00" {
			t.Errorf("compare row for %s: %q\n%s", name, row, cmp)
		}
	}
}

// fieldsOf is the fields of the first line of out whose first field is
// first.
func fieldsOf(out, first string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// TestBenchKeep checks that --keep leaves the fill in place, labelled
// with the run, so that a store of a known size can be measured after the
// run (the scale script's snapshot and catch-up phases).
func TestBenchKeep(t *testing.T) {
	n := startNode(t)
	stdout, stderr, err := runBench(t, 2*time.Minute, "bench", "--kubeconfig", n.kubeconfigPath(),
		"--workloads", "get", "--duration", "1s", "--clients", "2", "--objects", "9", "--keep")
	if err != nil {
		t.Fatalf("trustplane bench --keep: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	cs := n.clientset()
	ctx := context.Background()
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: bench.RunLabel})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			t.Errorf("namespace %s is being deleted", ns.Name)
		}
		cms, err := cs.CoreV1().ConfigMaps(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "fill-") {
				kept++
			}
		}
	}
	if kept != 3 {
		t.Fatalf("%d fill ConfigMaps are left in the run's namespaces %v, want 3 of the 9 objects\nstderr:\n%s", kept, nss.Items, stderr)
	}
	if !strings.Contains(stderr, "--keep") {
		t.Errorf("the run does not say what it kept:\n%s", stderr)
	}
}

// TestBenchFailingWorkload checks that a workload without one successful
// operation makes the command exit non-zero while the others are still
// reported: without controllers no signer issues the CSRs.
func TestBenchFailingWorkload(t *testing.T) {
	n := startNode(t, "--controllers=false")
	out := filepath.Join(t.TempDir(), "result.json")
	stdout, stderr, err := runBench(t, 2*time.Minute, "bench", "--kubeconfig", n.kubeconfigPath(),
		"--workloads", "get,csr", "--duration", "1s", "--clients", "2", "--request-timeout", "2s",
		"--cleanup-timeout", "2s", "--out", out)
	if err == nil {
		t.Fatalf("bench exited 0 although no CSR can be issued\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	if !strings.Contains(stderr, "workload failed: csr") {
		t.Errorf("stderr does not name the failed workload:\n%s", stderr)
	}
	res := readBenchResult(t, out)
	if w, ok := res.Workload("get"); !ok || w.Ops == 0 || w.Errors != 0 {
		t.Errorf("get: %+v", w)
	}
	w, ok := res.Workload("csr")
	if !ok || w.Ops != 0 || w.Errors == 0 || len(w.ErrorSamples) == 0 {
		t.Fatalf("csr: %+v", w)
	}
	if !strings.Contains(stdout, "csr FAILED") {
		t.Errorf("the table does not report csr as failed:\n%s", stdout)
	}
}

// TestBenchRefuses gives the command what it cannot work with: each case
// must end quickly, non-zero, with a message naming the problem.
func TestBenchRefuses(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, "dead.kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://` + freePort(t) + `
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: nothing
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(dead, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	notResult := filepath.Join(dir, "not-a-result.json")
	if err := os.WriteFile(notResult, []byte(`{"items":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unreachable server", []string{"bench", "--kubeconfig", dead, "--duration", "1s"}, "server unreachable"},
		{"a kubeconfig that does not exist", []string{"bench", "--kubeconfig", filepath.Join(dir, "missing"), "--duration", "1s"}, "missing"},
		{"an unknown workload", []string{"bench", "--kubeconfig", dead, "--workloads", "get,fly"}, `unknown workload "fly"`},
		{"no clients", []string{"bench", "--kubeconfig", dead, "--clients", "0"}, "clients 0"},
		{"a server pid that is no number", []string{"bench", "--kubeconfig", dead, "--server-pid", "etcd"}, `server pid "etcd" is not a number`},
		{"a server pid that runs nothing", []string{"bench", "--kubeconfig", dead, "--server-pid", "2147483647"}, "cannot read server process 2147483647"},
		{"compare without two files", []string{"bench", "compare", notResult}, "usage: trustplane bench compare"},
		{"plot without an output file", []string{"bench", "plot", "--y", "get:p99", notResult}, "usage: trustplane bench plot"},
		{"plot of a file that is no result", []string{"bench", "plot", "--y", "get:p99", "--out", filepath.Join(dir, "p.svg"), notResult}, "not a bench result"},
		{"compare of a file that is no result", []string{"bench", "compare", notResult, notResult}, "not a bench result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runBench(t, 60*time.Second, tc.args...)
			if err == nil {
				t.Fatalf("exit 0\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, stderr)
			}
		})
	}
}
