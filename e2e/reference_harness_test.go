package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/certs"
)

// referenceBinEnv names the directory holding the reference binaries
// (etcd, kube-apiserver, reference-certs; make reference-build writes
// them to bin/reference). Tests needing a reference skip without it: a
// cold build of kube-apiserver takes many minutes, so make test does
// without them and make fleet-test sets it.
const referenceBinEnv = "TRUSTPLANE_REFERENCE_BIN"

// referenceOptions shape a reference's kube-apiserver beyond the flags
// scripts/reference.sh gives it.
type referenceOptions struct {
	// ExtraArgs follow the harness's own flags; a single-valued flag
	// given again here wins (pflag keeps the last value).
	ExtraArgs []string
	// OmitOwnSigningKey drops --service-account-key-file and
	// --service-account-signing-key-file, for variants whose ExtraArgs
	// sign elsewhere (--service-account-signing-endpoint).
	OmitOwnSigningKey bool
}

// reference is an upstream kube-apiserver v1.33 with an etcd of its own,
// on free loopback ports, in a temporary directory of its test: pki/ (as
// reference-certs writes it), etcd's data, and one log per process. Its
// ServiceAccount issuer and API audience are its own URL, so that its
// discovery documents are served at its issuer URL.
type reference struct {
	t          testing.TB
	bin        string
	dir        string
	listen     string // kube-apiserver's 127.0.0.1:port
	etcdClient string
	etcdPeer   string
	procs      []*refProcess // in start order
	apiserver  *refProcess
}

// refProcess is one process the harness started; it is ended by its PID.
type refProcess struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait returns
	log  string
}

// needReference skips t unless referenceBinEnv names the reference
// binaries, and when the package runs against an external server (the
// scenarios start trustplane nodes with flags of their own).
func needReference(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(referenceBinEnv)
	if bin == "" {
		t.Skipf("needs a real kube-apiserver: set %s to the directory make reference-build writes (make fleet-test does)", referenceBinEnv)
	}
	if os.Getenv(externalEnv) != "" {
		t.Skipf("starts trustplane nodes with flags of their own; %s names a server this test does not run", externalEnv)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "reference-certs"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s=%s: %v (make reference-build writes it)", referenceBinEnv, bin, err)
		}
	}
	return bin
}

// newReference picks the reference's ports and writes its certificates,
// but starts nothing: a caller whose trustplane node must trust the
// reference's CA or name its URL starts the node first, then the
// reference with start. The processes end, and their logs' tails are
// printed if t failed, when t ends.
func newReference(t testing.TB) *reference {
	t.Helper()
	r := &reference{t: t, bin: needReference(t), dir: t.TempDir(),
		listen: freePort(t), etcdClient: freePort(t), etcdPeer: freePort(t)}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range r.procs {
				t.Logf("%s log (tail):\n%s", p.name, logTail(p.log, 6000))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(r.bin, "reference-certs"),
		"--dir", r.pki(""), "--server", r.url(), "--service-ip", "10.96.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("reference-certs: %v\n%s", err, out)
	}
	return r
}

// startReference is newReference and start.
func startReference(t testing.TB, opts referenceOptions) *reference {
	t.Helper()
	r := newReference(t)
	r.start(opts)
	return r
}

// start runs etcd and kube-apiserver and waits, bounded, until etcd is
// healthy, kube-apiserver's /readyz answers 200 and the default
// namespace exists (the apiserver creates it just after it is ready).
func (r *reference) start(opts referenceOptions) {
	r.t.Helper()
	if r.apiserver != nil {
		r.t.Fatal("the reference was started already")
	}
	etcd := r.launch("etcd",
		"--name", "reference", "--data-dir", filepath.Join(r.dir, "etcd"),
		"--listen-client-urls", "https://"+r.etcdClient,
		"--advertise-client-urls", "https://"+r.etcdClient,
		"--listen-peer-urls", "http://"+r.etcdPeer,
		"--initial-advertise-peer-urls", "http://"+r.etcdPeer,
		"--initial-cluster", "reference=http://"+r.etcdPeer,
		"--cert-file", r.pki("etcd-server.crt"), "--key-file", r.pki("etcd-server.key"),
		"--trusted-ca-file", r.pki("etcd-ca.crt"), "--client-cert-auth",
		"--snapshot-count", "10000")
	etcdClient := r.tlsClient(r.pki("etcd-ca.crt"), r.pki("apiserver-etcd-client.crt"), r.pki("apiserver-etcd-client.key"))
	r.waitOK(etcd, 60*time.Second, etcdClient, "https://"+r.etcdClient+"/health")

	_, port, err := net.SplitHostPort(r.listen)
	if err != nil {
		r.t.Fatal(err)
	}
	args := []string{
		"--bind-address", "127.0.0.1", "--secure-port", port,
		"--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--etcd-servers", "https://" + r.etcdClient,
		"--etcd-cafile", r.pki("etcd-ca.crt"),
		"--etcd-certfile", r.pki("apiserver-etcd-client.crt"), "--etcd-keyfile", r.pki("apiserver-etcd-client.key"),
		"--tls-cert-file", r.pki("apiserver.crt"), "--tls-private-key-file", r.pki("apiserver.key"),
		"--client-ca-file", r.pki("ca.crt"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", r.issuer(), "--api-audiences", r.issuer(),
		"--service-cluster-ip-range", "10.96.0.0/12",
	}
	if !opts.OmitOwnSigningKey {
		args = append(args, "--service-account-key-file", r.pki("sa.pub"), "--service-account-signing-key-file", r.pki("sa.key"))
	}
	r.apiserver = r.launch("kube-apiserver", append(args, opts.ExtraArgs...)...)
	admin := r.tlsClient(r.pki("ca.crt"), r.pki("admin.crt"), r.pki("admin.key"))
	r.waitOK(r.apiserver, 120*time.Second, admin, r.url()+"/readyz")
	r.waitOK(r.apiserver, 30*time.Second, admin, r.url()+"/api/v1/namespaces/default")
}

// launch starts bin/name with its output in name.log and ends it by PID
// when the test ends. Processes are started in dependency order, so the
// cleanups, last in first out, end kube-apiserver before etcd.
func (r *reference) launch(name string, args ...string) *refProcess {
	r.t.Helper()
	p := &refProcess{name: name, done: make(chan struct{}), log: filepath.Join(r.dir, name+".log")}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	p.cmd = exec.Command(filepath.Join(r.bin, name), args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		r.t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
	r.procs = append(r.procs, p)
	r.t.Cleanup(p.kill)
	return p
}

// kill ends the process at once (its data goes with the test) and waits,
// bounded, for it to exit.
func (p *refProcess) kill() {
	if !p.running() {
		return
	}
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

func (p *refProcess) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitOK polls url with c every 250 ms until it answers 200, failing
// the test if p exits first or timeout passes.
func (r *reference) waitOK(p *refProcess, timeout time.Duration, c *http.Client, url string) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: %s did not answer 200 within %v (last: %s)", p.name, url, timeout, last)
		}
		select {
		case <-p.done:
			r.t.Fatalf("%s exited (%v) before %s answered 200", p.name, p.cmd.ProcessState, url)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// tlsClient is an HTTPS client trusting caFile and presenting certFile.
func (r *reference) tlsClient(caFile, certFile, keyFile string) *http.Client {
	r.t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		r.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		r.t.Fatal(err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
}

// anonClient is an HTTPS client trusting the reference's CA and
// presenting no credentials.
func (r *reference) anonClient() *http.Client {
	r.t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.caPEM())
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// pki is the path of a file reference-certs wrote ("" for its directory).
func (r *reference) pki(name string) string { return filepath.Join(r.dir, "pki", name) }

func (r *reference) url() string { return "https://" + r.listen }

// issuer is the reference's --service-account-issuer and API audience.
func (r *reference) issuer() string { return r.url() }

// caPEM is the reference's cluster CA: it signed the serving certificate.
func (r *reference) caPEM() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.pki("ca.crt"))
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// kubeconfigPath is the reference's admin kubeconfig (system:masters).
func (r *reference) kubeconfigPath() string { return r.pki("admin.kubeconfig") }

// pid is kube-apiserver's process id.
func (r *reference) pid() int { return r.apiserver.cmd.Process.Pid }

// running reports whether kube-apiserver still runs.
func (r *reference) running() bool { return r.apiserver.running() }

// clientset is an admin clientset of the reference.
func (r *reference) clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", r.kubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// tokenConfig is a client configuration of the reference that
// authenticates with a bearer token only.
func (r *reference) tokenConfig(token string) *rest.Config {
	return &rest.Config{Host: r.url(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: r.pki("ca.crt")}}
}

// mustKubectl runs kubectl as the reference's admin and fails t on error.
func (r *reference) mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlPath(t), append([]string{"--kubeconfig", r.kubeconfigPath()}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+r.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s at the reference: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// logTail is the last max bytes of the file at path.
func logTail(path string, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// startNodeAt is startNode with the API on listen, picked by the caller
// (freePort): for flags that must name the node's own URL before it
// starts, such as --service-account-issuer https://<listen>.
func startNodeAt(t testing.TB, listen string, extraArgs ...string) *node {
	t.Helper()
	if os.Getenv(externalEnv) != "" {
		t.Skipf("starts a trustplane node of its own; %s names a server this test does not run", externalEnv)
	}
	n := &node{t: t, name: "n1", dir: t.TempDir(), listen: listen, raftAddr: freePort(t), args: extraArgs}
	n.start()
	t.Cleanup(n.kill)
	n.waitReady(60 * time.Second)
	n.waitControllers(30 * time.Second)
	return n
}

// nodeCAPEM is the CA bundle n's clients trust (its admin kubeconfig's):
// what a relying party verifies n's serving certificate with.
func nodeCAPEM(t testing.TB, n *node) []byte {
	t.Helper()
	cfg := n.restConfig()
	if len(cfg.CAData) > 0 {
		return cfg.CAData
	}
	b, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// webhookKubeconfig writes the kubeconfig kube-apiserver's
// --authentication-token-webhook-config-file wants to send its
// TokenReviews to n: the server is n's TokenReview URL itself, trusted
// with n's CA, and the client is user with a certificate of n's cluster
// CA.
func webhookKubeconfig(t testing.TB, n *node, user string) string {
	t.Helper()
	certPEM, keyPEM, err := n.clusterCA(t).Issue(certs.Request{CommonName: user, Client: true, Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "token-webhook.kubeconfig")
	if err := certs.WriteKubeconfig(path, certs.Kubeconfig{
		Server: n.url() + "/apis/authentication.k8s.io/v1/tokenreviews", ClusterName: "trustplane",
		UserName: user, CAPEM: nodeCAPEM(t, n), CertPEM: certPEM, KeyPEM: keyPEM,
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

// whoIs asks the server cfg names who cfg's credentials are there
// (SelfSubjectReview).
func whoIs(cfg *rest.Config) (authenticationv1.UserInfo, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return ssr.Status.UserInfo, nil
}

// isUser is nil when cfg's credentials are username at cfg's server.
func isUser(cfg *rest.Config, username string) error {
	who, err := whoIs(cfg)
	if err != nil {
		return err
	}
	if who.Username != username {
		return fmt.Errorf("authenticated as %q (groups %v), want %q", who.Username, who.Groups, username)
	}
	return nil
}

// waitForNil polls check every 250 ms until it returns nil, failing t
// with the last error after timeout. The timeout bounds the wait; how
// long it took is not asserted.
func waitForNil(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// errStillAccepted is waitForNil's error while a credential that should
// be refused still authenticates.
var errStillAccepted = errors.New("still authenticates")
