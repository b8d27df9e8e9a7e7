package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/internal/failpoint"
)

// binPath is the trustplane binary built once for the whole package.
var binPath string

// externalEnv names a kubeconfig to run the scenarios against instead of
// trustplane processes this package starts: another trustplane cluster,
// or kube-apiserver (make reference), to see where behaviour differs.
// Scenarios that need to own a process (restarts, kills, server flags,
// several nodes, the data directory) skip. externalCAEnv optionally names
// a directory with the server's client CA (ca.crt, ca.key), so that
// scenarios acting as other users can mint their certificates.
const (
	externalEnv   = "TRUSTPLANE_E2E_KUBECONFIG"
	externalCAEnv = "TRUSTPLANE_E2E_CA_DIR"
)

func TestMain(m *testing.M) {
	if id := os.Getenv(leaseCandidateEnv); id != "" {
		// A leader-election candidate (e2e_lease_test.go), not a test run.
		os.Exit(runLeaseCandidate(id))
	}
	if id := os.Getenv(acceptanceControllerEnv); id != "" {
		// The acceptance controller (e2e_acceptance_test.go).
		os.Exit(runAcceptanceController(id))
	}
	if os.Getenv(externalEnv) != "" {
		// Against an external server the binary is still built: the
		// bench and kubeconfig scenarios run its subcommands as clients.
		fmt.Fprintf(os.Stderr, "e2e: running against %s (%s); scenarios that need their own trustplane process skip\n", os.Getenv(externalEnv), externalEnv)
	}
	dir, err := os.MkdirTemp("", "trustplane-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "trustplane")
	args := []string{"build", "-o", binPath}
	if failpoint.Enabled {
		// go test -tags failpoints: the binary under test has them too.
		args = append(args, "-tags", "failpoints")
	}
	build := exec.Command("go", append(args, "github.com/trustplane/trustplane/cmd/trustplane")...)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building trustplane:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is one real trustplane process on loopback ports.
type node struct {
	t        testing.TB
	name     string
	dir      string
	listen   string
	raftAddr string
	// caDir is the shared cluster CA (--ca-dir); "" means <dir>/pki.
	caDir string
	// external is the kubeconfig of a server this package does not run
	// (externalEnv); "" for a process of its own.
	external string
	args     []string
	// isTP caches isTrustplane's probe of an external server.
	isTP     sync.Once
	tpServer bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// handedOut remembers ports freePort returned, so that one test process
// never gives the same port to two nodes.
var handedOut sync.Map

// freePort returns a loopback address whose port was free a moment ago for
// both TCP and UDP (gossip binds both), and was not handed out before.
func freePort(t testing.TB) string {
	t.Helper()
	return freePortOn(t, "127.0.0.1", true)
}

// startNode starts a one-node cluster in a fresh data dir and waits until it
// is ready. The process is stopped when the test ends.
func startNode(t testing.TB, extraArgs ...string) *node {
	t.Helper()
	if kc := os.Getenv(externalEnv); kc != "" {
		return externalNode(t, kc, extraArgs)
	}
	n := &node{
		t: t, name: "n1", dir: t.TempDir(),
		listen: freePort(t), raftAddr: freePort(t), args: extraArgs,
	}
	n.start()
	// Tests that care about a graceful stop call n.stop themselves; at the
	// end a kill is enough (the data directory goes with the test) and
	// saves the seconds a graceful shutdown takes.
	t.Cleanup(n.kill)
	n.waitReady(60 * time.Second)
	n.waitControllers(30 * time.Second)
	return n
}

// externalNode is the server behind kubeconfig kc as a node the scenario
// may talk to but not control.
func externalNode(t testing.TB, kc string, extraArgs []string) *node {
	t.Helper()
	if len(extraArgs) > 0 {
		t.Skipf("needs a trustplane node started with %v; %s names a server with flags of its own", extraArgs, externalEnv)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("%s: %v", externalEnv, err)
	}
	n := &node{t: t, name: "external", dir: t.TempDir(), external: kc, caDir: os.Getenv(externalCAEnv)}
	n.listen = strings.TrimPrefix(strings.TrimSuffix(cfg.Host, "/"), "https://")
	n.waitReady(60 * time.Second)
	n.waitControllers(30 * time.Second)
	return n
}

// needsProcess skips the scenario when the node is not a process of this
// package's own.
func (n *node) needsProcess(what string) {
	n.t.Helper()
	if n.external != "" {
		n.t.Skipf("needs to %s a trustplane process of its own; %s names a server this test does not run", what, externalEnv)
	}
}

// isTrustplane reports whether the server is trustplane: always for a
// process of this package's own; for an external server, when it serves
// trustplane's raft status endpoint to the admin.
func (n *node) isTrustplane() bool {
	if n.external == "" {
		return true
	}
	n.isTP.Do(func() {
		r := do(n.t, n.httpClient(), http.MethodGet, n.url()+"/debug/trustplane/raft", nil, nil)
		n.tpServer = r.code == http.StatusOK
	})
	return n.tpServer
}

// trustplaneOnly skips t when the server is not trustplane: what t checks
// is trustplane's own behaviour, where kube-apiserver knowingly differs
// (what is named, recorded in docs/COMPATIBILITY.md).
func (n *node) trustplaneOnly(t testing.TB, what string) {
	t.Helper()
	if !n.isTrustplane() {
		t.Skipf("checks trustplane's own behaviour (%s; docs/COMPATIBILITY.md); %s names a server that is not trustplane", what, externalEnv)
	}
}

// scrub deletes objects (kubectl's "kind/name", in the default namespace
// unless "-n ns" follows) that a scenario creates under fixed names, on an
// external server only: before the scenario, in case an earlier run left
// them, and when it ends. A node of this package's own starts empty.
func (n *node) scrub(t testing.TB, objects ...string) {
	t.Helper()
	if n.external == "" {
		return
	}
	del := func() {
		for _, o := range objects {
			args := append([]string{"delete", "--ignore-not-found", "--wait=true", "--timeout=60s"}, strings.Fields(o)...)
			if out, err := n.kubectl(args...); err != nil {
				t.Logf("scrub %s: %v\n%s", o, err, out)
			}
		}
	}
	del()
	t.Cleanup(del)
}

// pid is the node's process id.
func (n *node) pid() int {
	n.t.Helper()
	n.needsProcess("measure")
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.Process.Pid
}

// waitControllers waits until the leader's controllers have given the
// default namespace its ServiceAccount and kube-root-ca.crt, so that tests
// comparing what exists do not race them. It does nothing when the node
// runs without controllers.
func (n *node) waitControllers(timeout time.Duration) {
	n.t.Helper()
	for _, a := range n.args {
		if a == "--controllers=false" {
			return
		}
	}
	c := n.httpClient()
	deadline := time.Now().Add(timeout)
	for _, path := range []string{"/api/v1/namespaces/default/serviceaccounts/default", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"} {
		for {
			resp, err := c.Get(n.url() + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				n.t.Fatalf("the controllers did not create %s within %v:\n%s", path, timeout, n.logTail())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (n *node) start() {
	n.t.Helper()
	n.needsProcess("start")
	args := append([]string{"serve",
		"--data-dir", n.dir, "--listen", n.listen, "--raft-addr", n.raftAddr, "--node-name", n.name,
	}, n.args...)
	logf, err := os.OpenFile(filepath.Join(n.dir, "trustplane.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command(binPath, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done, n.log = cmd, done, logf
	n.mu.Unlock()
}

// signal sends sig and waits (bounded) for the process to exit.
func (n *node) signal(sig syscall.Signal, wait time.Duration) {
	n.needsProcess("signal")
	n.mu.Lock()
	cmd, done, logf := n.cmd, n.done, n.log
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(wait):
		cmd.Process.Kill()
		<-done
	}
	logf.Close()
}

// stop ends the process gracefully (SIGTERM); it is idempotent.
func (n *node) stop() { n.signal(syscall.SIGTERM, 15*time.Second) }

// kill ends the process at once (SIGKILL).
func (n *node) kill() { n.signal(syscall.SIGKILL, 5*time.Second) }

// restart stops the node and starts it again on the same data dir and ports.
func (n *node) restart() {
	n.t.Helper()
	n.stop()
	n.start()
	n.waitReady(60 * time.Second)
}

func (n *node) url() string { return "https://" + n.listen }

func (n *node) kubeconfigPath() string {
	if n.external != "" {
		return n.external
	}
	return filepath.Join(n.dir, "admin.kubeconfig")
}

// logTail is the end of the node's log, for failure messages.
func (n *node) logTail() string {
	if n.external != "" {
		return "(an external server: its log is its own)"
	}
	b, _ := os.ReadFile(filepath.Join(n.dir, "trustplane.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// fullLog is everything the node has logged, across restarts.
func (n *node) fullLog() string {
	n.needsProcess("read the log of")
	b, _ := os.ReadFile(filepath.Join(n.dir, "trustplane.log"))
	return string(b)
}

// caPool reads the cluster CAs the node trusts: those of its admin
// kubeconfig once it has written one (the node rewrites it as the cluster
// CA rotates), else its CA directory's.
func (n *node) caPool() *x509.CertPool {
	if _, err := os.Stat(n.kubeconfigPath()); err == nil {
		cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfigPath())
		if err != nil {
			return nil
		}
		pem := cfg.CAData
		if len(pem) == 0 && cfg.CAFile != "" {
			pem, _ = os.ReadFile(cfg.CAFile)
		}
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pem) {
			return nil
		}
		return p
	}
	pem, err := os.ReadFile(filepath.Join(n.caDirPath(), "ca.crt"))
	if err != nil {
		return nil
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

// waitReady polls /readyz without credentials until it answers 200 and the
// admin kubeconfig exists.
func (n *node) waitReady(timeout time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if pool := n.caPool(); pool != nil {
			c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			resp, err := c.Get(n.url() + "/readyz")
			if err == nil {
				resp.Body.Close()
				if _, serr := os.Stat(n.kubeconfigPath()); resp.StatusCode == http.StatusOK && serr == nil {
					return
				}
			}
		}
		if n.external != "" {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-done:
			n.t.Fatalf("trustplane exited before it was ready:\n%s", n.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.t.Fatalf("trustplane was not ready after %v:\n%s", timeout, n.logTail())
}

// restConfig is an admin client configuration from the node's kubeconfig.
func (n *node) restConfig() *rest.Config {
	n.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfigPath())
	if err != nil {
		n.t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

// clientset is an admin client-go clientset speaking JSON.
func (n *node) clientset() *kubernetes.Clientset {
	n.t.Helper()
	cs, err := kubernetes.NewForConfig(n.restConfig())
	if err != nil {
		n.t.Fatal(err)
	}
	return cs
}

// protoClientset is an admin clientset speaking protobuf.
func (n *node) protoClientset() *kubernetes.Clientset {
	n.t.Helper()
	cfg := n.restConfig()
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	return cs
}

// httpClient is a raw HTTPS client with the admin certificate.
func (n *node) httpClient() *http.Client {
	n.t.Helper()
	cfg := n.restConfig()
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// anonClient is an HTTPS client that trusts the CA but presents no certificate.
func (n *node) anonClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: n.caPool()}}}
}

// kubectlPath finds kubectl; end-to-end tests need the real one.
func kubectlPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not on PATH: the end-to-end tests drive the real kubectl: %v", err)
	}
	return p
}

// kubectl runs kubectl against the node and returns its combined output.
func (n *node) kubectl(args ...string) (string, error) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlPath(n.t), append([]string{"--kubeconfig", n.kubeconfigPath()}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+n.dir)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// mustKubectl runs kubectl and fails the test on error.
func (n *node) mustKubectl(args ...string) string {
	n.t.Helper()
	out, err := n.kubectl(args...)
	if err != nil {
		n.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
