package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/freeport"
	"github.com/trustplane/trustplane/internal/testlog"
)

// testLogger discards logs unless TRUSTPLANE_TEST_LOG is set. (Logging to
// t.Log would panic if raft logs after the test returns.)
func testLogger() *slog.Logger {
	if os.Getenv("TRUSTPLANE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testCA is a throwaway CA for transport tests. It lives here rather than
// using package certs so cluster's tests keep cluster's import rules.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// nodeCert issues a client+server certificate for 127.0.0.1.
func (ca *testCA) nodeCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// tlsConfig is a node TLS config: cert from issuer, trusting trust.
func tlsConfig(cert tls.Certificate, trust *testCA) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: trust.pool, ClientCAs: trust.pool}
}

// certPeerName is Config.PeerName for test certificates, whose common
// name is the node name.
func certPeerName(c net.Conn) (string, error) {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return "", fmt.Errorf("%T is not a TLS connection", c)
	}
	chains := tc.ConnectionState().VerifiedChains
	if len(chains) == 0 {
		return "", errors.New("no verified client certificate")
	}
	return chains[0][0].Subject.CommonName, nil
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for tests that restart a node on the same address.
func freeAddr(t *testing.T) string {
	t.Helper()
	// Below the ephemeral range, and never twice in one test binary: a
	// port the kernel hands out for :0 may be handed out again (or taken
	// by an outbound connection) before the node binds it.
	freeAddrs.Lock()
	defer freeAddrs.Unlock()
	if freeAddrs.given == nil {
		freeAddrs.given = map[string]bool{}
	}
	addr, err := freeport.On("127.0.0.1", true, func(a string) bool { return freeAddrs.given[a] })
	if err != nil {
		t.Fatal(err)
	}
	freeAddrs.given[addr] = true
	return addr
}

// freeAddrs are the addresses freeAddr handed out.
var freeAddrs struct {
	sync.Mutex
	given map[string]bool
}

// waitFor polls cond until it holds. The limit only turns a hang into a
// failure; nothing asserts on how long it took.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func putCmd(name, value string) *fsm.Command {
	return &fsm.Command{
		Op:    fsm.OpPut,
		Key:   testKey(name),
		Value: []byte(value),
		UID:   "uid-" + name,
	}
}

func testKey(name string) fsm.Key {
	return fsm.Key{Resource: "configmaps", Namespace: "default", Name: name}
}

// fastRaft shortens raft's timeouts for in-memory clusters.
func fastRaft(rc *raft.Config) {
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 100 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
}

// inmemCluster is n nodes on raft's in-memory transport and stores.
type inmemCluster struct {
	nodes []*Node
	fsms  []*fsm.FSM
}

// newInmemCluster starts n nodes that all bootstrap the same n-voter
// configuration, the way a BootstrapExpect=n start will.
func newInmemCluster(t *testing.T, n int, bootstrap bool, opts ...func(*Config)) *inmemCluster {
	t.Helper()
	var (
		addrs  []raft.ServerAddress
		transs []*raft.InmemTransport
		conf   []raft.Server
	)
	for i := range n {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("inmem-%d", i)))
		addrs = append(addrs, addr)
		transs = append(transs, tr)
		conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("node-%d", i)), Address: addr})
	}
	for i, a := range transs {
		for j, b := range transs {
			if i != j {
				a.Connect(addrs[j], b)
			}
		}
	}
	c := &inmemCluster{}
	for i := range n {
		cfg := DefaultConfig()
		cfg.NodeName = fmt.Sprintf("node-%d", i)
		cfg.DataDir = t.TempDir()
		cfg.Logger = testLogger()
		for _, o := range opts {
			o(cfg)
		}
		store := raft.NewInmemStore()
		d := deps{
			logs:   store,
			stable: store,
			snaps:  raft.NewInmemSnapshotStore(),
			trans:  transs[i],
			tune:   fastRaft,
		}
		if bootstrap {
			d.bootstrap = conf
		}
		f := fsm.New()
		node, err := newNode(cfg, f, d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Shutdown() })
		c.nodes = append(c.nodes, node)
		c.fsms = append(c.fsms, f)
	}
	return c
}

// leader waits for a leader that every node agrees on and that has applied
// its term barrier, and returns its position.
func (c *inmemCluster) leader(t *testing.T) int {
	t.Helper()
	var li int
	waitFor(t, "a leader known to all nodes", func() bool {
		li = -1
		for i, n := range c.nodes {
			if n.readReady() {
				li = i
			}
		}
		if li < 0 {
			return false
		}
		want := c.nodes[li].cfg.NodeName
		for _, n := range c.nodes {
			if id, _ := n.Leader(); id != want {
				return false
			}
		}
		return true
	})
	return li
}

// tcpCluster is nodes the way New builds them: real TCP, mutual TLS, bolt
// and gossip on loopback, bootstrapping together.
type tcpCluster struct {
	t           *testing.T
	ca          *testCA
	key         []byte
	gossipAddrs []string
	raftAddrs   []string
	logs        []*testlog.Buffer
}

func newTCPCluster(t *testing.T, size int) *tcpCluster {
	c := &tcpCluster{t: t, ca: newTestCA(t, "cluster-ca"), key: make([]byte, 32), logs: make([]*testlog.Buffer, size)}
	_, _ = rand.Read(c.key)
	for range size {
		c.gossipAddrs = append(c.gossipAddrs, freeAddr(t))
		c.raftAddrs = append(c.raftAddrs, freeAddr(t))
	}
	return c
}

// start starts node i on dir, with gossip at gossipAt.
func (c *tcpCluster) start(i int, dir, gossipAt string) (*Node, error) {
	name := fmt.Sprintf("tcp-%d", i)
	c.logs[i] = &testlog.Buffer{}
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.DataDir = dir
	cfg.RaftAddr = c.raftAddrs[i]
	cfg.TLS = tlsConfig(c.ca.nodeCert(c.t, name), c.ca)
	cfg.PeerName = certPeerName
	cfg.Logger = c.logs[i].Logger()
	cfg.BootstrapExpect = len(c.raftAddrs)
	cfg.GossipAddr = gossipAt
	cfg.GossipKey = c.key
	cfg.Join = c.gossipAddrs
	cfg.ClusterID = "tcp-cluster"
	cfg.DeadServerTimeout = -1
	n, err := New(cfg, fsm.New())
	if err == nil {
		c.t.Cleanup(func() { _ = n.Shutdown() })
	}
	return n, err
}

// startAll starts every node at once, each on a new data directory.
func (c *tcpCluster) startAll() []*Node {
	t := c.t
	nodes := make([]*Node, len(c.raftAddrs))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = c.start(i, t.TempDir(), c.gossipAddrs[i])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// tcpLeader waits for one of among to be a leader that may serve reads.
func tcpLeader(t *testing.T, among ...*Node) *Node {
	t.Helper()
	var l *Node
	waitFor(t, "a leader", func() bool {
		l = nil
		for _, n := range among {
			if n.readReady() {
				l = n
			}
		}
		return l != nil
	})
	return l
}
