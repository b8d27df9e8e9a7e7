package local

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/chaos/faultproxy"
	"github.com/trustplane/trustplane/internal/freeport"
)

// ErrNoFailpoints: the binary was not built with -tags failpoints.
var ErrNoFailpoints = errors.New("the trustplane binary was built without -tags failpoints")

// Options configure a local cluster.
type Options struct {
	// Bin is the trustplane binary; Dir holds the CA and every node's data.
	Bin string
	Dir string
	// Nodes is the cluster size (3 or 5): the voters.
	Nodes int
	// Replicas are read replicas (--role replica) started once the voters
	// are ready, named after them (n4, n5 beside three voters). The
	// faults and the workload treat them as any node.
	Replicas int
	// Args are extra "serve" flags for every node.
	Args []string
	// EncryptAtRest gives every node the same encryption configuration
	// (aescbc for Secrets, with a random key), so that the encryption key
	// can be rotated under the workload.
	EncryptAtRest bool
	// Log receives the nodes' output (one file per node is kept in Dir too).
	Log io.Writer
}

// Cluster is N local trustplane processes and their proxies.
type Cluster struct {
	opts       Options
	nodes      []*Node
	failpoints bool
	pool       *x509.CertPool
}

// Node is one process of the cluster.
type Node struct {
	Name string
	IP   string
	Dir  string
	// API is the client address; Raft and Gossip the ports the process
	// binds; the proxies listen on RaftProxy and GossipProxy, which are
	// what the node advertises.
	API, Raft, Gossip, RaftProxy, GossipProxy string

	// APIProxy is the address followers forward writes to (the node
	// advertises its IP with --advertise-address); clients use API.
	APIProxy string

	args    []string
	proxies *faultproxy.Node

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	logf   *os.File
}

// Start creates the CA, starts every node with its proxies and waits
// until all are ready (bounded by ctx).
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	c := &Cluster{opts: o}
	if out, err := exec.Command(o.Bin, "version").Output(); err == nil && strings.Contains(string(out), "+failpoints") {
		c.failpoints = true
	}
	caDir := filepath.Join(o.Dir, "ca")
	if out, err := exec.Command(o.Bin, "certs", "init", "--dir", caDir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("local: certs init: %v: %s", err, out)
	}
	pem, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	c.pool = x509.NewCertPool()
	c.pool.AppendCertsFromPEM(pem)
	// The kubelet-serving signer gets a CA of its own, so that the rotate
	// fault has a signer's CA to rotate (signer-ca-kubelet-serving).
	signerCA, err := certs.NewSignerCA("kubelet-serving")
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	signerCert, signerKey := filepath.Join(caDir, "kubelet-serving-ca.crt"), filepath.Join(caDir, "kubelet-serving-ca.key")
	if err := signerCA.WriteFiles(signerCert, signerKey); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	o.Args = append(o.Args, "--cluster-signing-kubelet-serving-cert-file", signerCert, "--cluster-signing-kubelet-serving-key-file", signerKey)
	if o.EncryptAtRest {
		path, err := writeEncryptionConfig(o.Dir)
		if err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		o.Args = append(o.Args, "--encryption-provider-config", path)
	}

	for i := 0; i < o.Nodes+o.Replicas; i++ {
		n := &Node{Name: fmt.Sprintf("n%d", i+1), IP: fmt.Sprintf("127.0.0.%d", 11+i)}
		n.Dir = filepath.Join(o.Dir, n.Name)
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			c.Close()
			return nil, err
		}
		if err := n.listen(); err != nil {
			c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	seeds := make([]string, 0, o.Nodes)
	for _, n := range c.nodes[:o.Nodes] {
		seeds = append(seeds, n.GossipProxy)
	}
	for i, n := range c.nodes {
		apiIP, _, _ := net.SplitHostPort(n.APIProxy)
		n.args = append([]string{"serve",
			"--node-name", n.Name, "--data-dir", n.Dir, "--ca-dir", caDir,
			"--listen", n.API, "--raft-addr", n.Raft, "--raft-advertise-addr", n.RaftProxy,
			"--gossip-addr", n.Gossip, "--gossip-advertise-addr", n.GossipProxy,
			"--advertise-address", apiIP,
			"--bootstrap-expect", strconv.Itoa(o.Nodes), "--join", strings.Join(seeds, ","),
		}, o.Args...)
		if i >= o.Nodes {
			n.args = append(n.args, "--role", "replica")
		}
	}
	// The voters first, then the replicas, which join a formed cluster.
	for _, group := range [][]*Node{c.nodes[:o.Nodes], c.nodes[o.Nodes:]} {
		for _, n := range group {
			if err := c.startProcess(n); err != nil {
				c.Close()
				return nil, err
			}
		}
		for _, n := range group {
			if err := c.WaitReady(ctx, n.Name); err != nil {
				c.Close()
				return nil, err
			}
		}
	}
	return c, nil
}

// freePorts returns count addresses on ip whose ports were free a moment
// ago for TCP and UDP both (gossip binds both).
func freePorts(ip string, count int) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for len(out) < count {
		// Below the ephemeral range (internal/freeport): a killed node's
		// ports stay its own while it is down.
		addr, err := freeport.On(ip, true, func(addr string) bool { return seen[addr] })
		if err != nil {
			return nil, fmt.Errorf("local: %w (is 127.0.0.0/8 routed to lo?)", err)
		}
		seen[addr] = true
		out = append(out, addr)
	}
	return out, nil
}

// listen picks the node's ports and starts its proxies: raft and gossip
// on the node's IP, the API's on 127.0.0.(20+i) with the API's own port
// (an advertised API address is a host only).
func (n *Node) listen() error {
	var i int
	fmt.Sscanf(n.IP, "127.0.0.%d", &i)
	apiIP := fmt.Sprintf("127.0.0.%d", i+10)
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		ports, err := freePorts(n.IP, 3)
		if err != nil {
			return err
		}
		n.API, n.Raft, n.Gossip = ports[0], ports[1], ports[2]
		_, apiPort, _ := net.SplitHostPort(n.API)
		n.APIProxy = net.JoinHostPort(apiIP, apiPort)
		p, err := faultproxy.ListenNode(faultproxy.NodeConfig{IP: n.IP, Raft: n.Raft, Gossip: n.Gossip, API: n.API, APIListen: n.APIProxy})
		if err != nil {
			last = err
			continue
		}
		n.proxies, n.RaftProxy, n.GossipProxy = p, p.RaftAddr(), p.GossipAddr()
		return nil
	}
	return fmt.Errorf("local: proxies for %s: %w", n.Name, last)
}

// Failpoints reports whether the binary supports the disk faults.
func (c *Cluster) Failpoints() bool { return c.failpoints }

// Names lists the nodes in order.
func (c *Cluster) Names() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Name
	}
	return out
}

func (c *Cluster) node(name string) (*Node, error) {
	for _, n := range c.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("local: no node %q", name)
}

// Config is an admin client configuration for a node.
func (c *Cluster) Config(name string) (*rest.Config, error) {
	n, err := c.node(name)
	if err != nil {
		return nil, err
	}
	return clientcmd.BuildConfigFromFlags("", filepath.Join(n.Dir, "admin.kubeconfig"))
}

func (c *Cluster) startProcess(n *Node) error {
	logf, err := os.OpenFile(filepath.Join(n.Dir, "trustplane.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.opts.Bin, n.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("local: starting %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done, n.logf, n.paused = cmd, done, logf, false
	n.mu.Unlock()
	return nil
}

// trust is the pool n's server is verified with: the cluster CAs of its
// admin kubeconfig, which the node rewrites as the cluster CA rotates, else
// the CA directory's.
func (c *Cluster) trust(n *Node) *x509.CertPool {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(n.Dir, "admin.kubeconfig"))
	if err != nil {
		return c.pool
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(cfg.CAData) {
		return c.pool
	}
	return p
}

// WaitReady polls the node's /readyz until it answers 200 and its admin
// kubeconfig exists, or ctx ends (bounded to 90 s).
func (c *Cluster) WaitReady(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.trust(n)}}}
		resp, err := hc.Get("https://" + n.API + "/readyz")
		hc.CloseIdleConnections()
		if err == nil {
			resp.Body.Close()
			if _, serr := os.Stat(filepath.Join(n.Dir, "admin.kubeconfig")); resp.StatusCode == http.StatusOK && serr == nil {
				return nil
			}
		}
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("local: %s exited before it was ready; see %s", n.Name, filepath.Join(n.Dir, "trustplane.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("local: %s not ready after 90s; see %s", n.Name, filepath.Join(n.Dir, "trustplane.log"))
}

// signal ends the process with sig, waiting (bounded) for it to exit.
func (c *Cluster) signal(name string, sig syscall.Signal, wait time.Duration) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	cmd, done, logf, paused := n.cmd, n.done, n.logf, n.paused
	n.cmd, n.paused = nil, false
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(sig)
	if paused {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
	case <-time.After(wait):
		cmd.Process.Kill()
		<-done
	}
	logf.Close()
	return nil
}

// Kill ends a node at once (SIGKILL).
func (c *Cluster) Kill(name string) error { return c.signal(name, syscall.SIGKILL, 10*time.Second) }

// Stop ends a node gracefully (SIGTERM).
func (c *Cluster) Stop(name string) error { return c.signal(name, syscall.SIGTERM, 20*time.Second) }

// Restart starts a stopped or killed node again on its data and ports,
// and waits until it is ready.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	running := n.cmd != nil
	n.mu.Unlock()
	if !running {
		if err := c.startProcess(n); err != nil {
			return err
		}
	}
	return c.WaitReady(ctx, name)
}

// Pause freezes a node (SIGSTOP); Resume continues it.
func (c *Cluster) Pause(name string) error  { return c.pause(name, true) }
func (c *Cluster) Resume(name string) error { return c.pause(name, false) }

func (c *Cluster) pause(name string, stop bool) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.paused == stop {
		return nil
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	n.paused = stop
	return n.cmd.Process.Signal(sig)
}

// rule sets r on dst's proxies for traffic from src.
func (c *Cluster) rule(dst, src *Node, r faultproxy.Rule) { dst.proxies.SetRule(src.IP, r) }

// Isolate cuts every link between name and the other nodes, both ways.
func (c *Cluster) Isolate(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	for _, o := range c.nodes {
		if o != n {
			c.rule(n, o, faultproxy.Rule{Drop: true})
			c.rule(o, n, faultproxy.Rule{Drop: true})
		}
	}
	return nil
}

// OneWay drops what from sends to to, and nothing else: to still reaches
// from, but from's requests and answers to to are lost.
func (c *Cluster) OneWay(from, to string) error {
	f, err := c.node(from)
	if err != nil {
		return err
	}
	t, err := c.node(to)
	if err != nil {
		return err
	}
	// Connections from→to pass t's proxy: drop their requests. Connections
	// to→from pass f's proxy: drop their answers.
	c.rule(t, f, faultproxy.Rule{DropInbound: true})
	c.rule(f, t, faultproxy.Rule{DropOutbound: true})
	return nil
}

// Delay adds d to every link of name, both ways.
func (c *Cluster) Delay(name string, d time.Duration) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	for _, o := range c.nodes {
		if o != n {
			c.rule(n, o, faultproxy.Rule{Delay: d})
			c.rule(o, n, faultproxy.Rule{Delay: d})
		}
	}
	return nil
}

// Heal clears every network rule.
func (c *Cluster) Heal() {
	for _, n := range c.nodes {
		n.proxies.ClearRules()
	}
}

// SlowDisk delays every raft log write of name by d (failpoints only).
func (c *Cluster) SlowDisk(name string, d time.Duration) error {
	return c.failpoint(name, fmt.Sprintf("fsync-delay=%s\n", d))
}

// FullDisk makes every write to name's disk fail with ENOSPC.
func (c *Cluster) FullDisk(name string) error { return c.failpoint(name, "disk-full=true\n") }

// HealDisk clears the disk faults of name.
func (c *Cluster) HealDisk(name string) error { return c.failpoint(name, "") }

func (c *Cluster) failpoint(name, content string) error {
	if !c.failpoints {
		return ErrNoFailpoints
	}
	n, err := c.node(name)
	if err != nil {
		return err
	}
	tmp := filepath.Join(n.Dir, "failpoints.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(n.Dir, "failpoints"))
}

// Close kills every process and proxy it started.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		c.signal(n.Name, syscall.SIGKILL, 10*time.Second)
		if n.proxies != nil {
			n.proxies.Close()
		}
	}
}

// writeEncryptionConfig writes kube's EncryptionConfiguration for Secrets
// (aescbc with a random key, then identity) into dir, 0600.
func writeEncryptionConfig(dir string) (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	cfg := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: chaos\n        secret: " +
		base64.StdEncoding.EncodeToString(key) + "\n  - identity: {}\n"
	path := filepath.Join(dir, "encryption.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
