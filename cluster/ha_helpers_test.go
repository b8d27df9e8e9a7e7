package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/testlog"
)

// rpcRouter is the internal RPC for in-memory clusters: net.Pipe
// connections to the registered handlers, with partitions mirroring the
// in-memory raft transport's Disconnect.
type rpcRouter struct {
	mu       sync.Mutex
	handlers map[raft.ServerAddress]func(net.Conn)
	names    map[raft.ServerAddress]string
	cut      map[[2]raft.ServerAddress]bool
	// conns are the server ends handed to each address's handler, closed
	// when a new node registers there (the old process is gone).
	conns map[raft.ServerAddress][]net.Conn
	// pairs are the client ends dialed from one address to another,
	// closed when the two are partitioned: a cut resets the connections
	// already made, so that none pooled before it reaches across.
	pairs map[[2]raft.ServerAddress][]net.Conn
}

func newRPCRouter() *rpcRouter {
	return &rpcRouter{handlers: map[raft.ServerAddress]func(net.Conn){}, names: map[raft.ServerAddress]string{}, cut: map[[2]raft.ServerAddress]bool{}}
}

// routedConn is the server end of a routed connection; from stands in for
// the certificate that names the caller on a real transport.
type routedConn struct {
	net.Conn
	from raft.ServerAddress
}

// peerName is Config.PeerName for routed connections.
func (r *rpcRouter) peerName(c net.Conn) (string, error) {
	rc, ok := c.(*routedConn)
	if !ok {
		return "", fmt.Errorf("rpc router: %T is not a routed connection", c)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name, ok := r.names[rc.from]
	if !ok {
		return "", fmt.Errorf("rpc router: no node at %s", rc.from)
	}
	return name, nil
}

func (r *rpcRouter) register(addr raft.ServerAddress) func(func(net.Conn)) {
	return func(h func(net.Conn)) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.handlers[addr] = h
		for _, c := range r.conns[addr] {
			_ = c.Close()
		}
		delete(r.conns, addr)
	}
}

func (r *rpcRouter) dialer(from raft.ServerAddress) func(context.Context, raft.ServerAddress) (net.Conn, error) {
	return func(ctx context.Context, to raft.ServerAddress) (net.Conn, error) {
		r.mu.Lock()
		h, ok := r.handlers[to]
		cut := r.cut[[2]raft.ServerAddress{from, to}]
		r.mu.Unlock()
		if !ok || cut {
			return nil, fmt.Errorf("rpc router: %s unreachable from %s", to, from)
		}
		client, server := net.Pipe()
		r.mu.Lock()
		if r.conns == nil {
			r.conns = map[raft.ServerAddress][]net.Conn{}
		}
		r.conns[to] = append(r.conns[to], server)
		if r.pairs == nil {
			r.pairs = map[[2]raft.ServerAddress][]net.Conn{}
		}
		pair := [2]raft.ServerAddress{from, to}
		r.pairs[pair] = append(r.pairs[pair], client)
		r.mu.Unlock()
		go h(&routedConn{Conn: server, from: from})
		return client, nil
	}
}

func (r *rpcRouter) partition(a, b raft.ServerAddress, cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pair := range [][2]raft.ServerAddress{{a, b}, {b, a}} {
		r.cut[pair] = cut
		if cut {
			for _, c := range r.pairs[pair] {
				_ = c.Close()
			}
			delete(r.pairs, pair)
		}
	}
}

// fastGossip shortens memberlist's intervals for loopback tests.
func fastGossip(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = 2 * time.Second
	c.SuspicionMult = 3
	c.GossipToTheDeadTime = 5 * time.Second
}

// haNode is one node of an haCluster.
type haNode struct {
	name  string
	addr  raft.ServerAddress
	trans *raft.InmemTransport
	node  *Node
	fsm   *fsm.FSM
	logs  *testlog.Buffer
	// store and snaps are the node's raft state (its "data directory").
	store *raft.InmemStore
	snaps *raft.InmemSnapshotStore
}

// haCluster is an in-process cluster on raft's in-memory transport, with
// the in-memory RPC router and, optionally, real memberlist on loopback.
type haCluster struct {
	t         *testing.T
	router    *rpcRouter
	key       []byte
	clusterID string
	mu        sync.Mutex
	nodes     []*haNode
	trans     map[raft.ServerAddress]*raft.InmemTransport
	// tuneGossip, if set, adjusts every node's memberlist config after
	// fastGossip.
	tuneGossip func(*memberlist.Config)
}

func newHACluster(t *testing.T) *haCluster {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &haCluster{t: t, router: newRPCRouter(), key: key, clusterID: "cluster-a", trans: map[raft.ServerAddress]*raft.InmemTransport{}}
}

type haOpts struct {
	expect    int
	gossip    bool
	join      []string
	gossipAt  string        // gossip address; "" picks a free port
	bootstrap []raft.Server // written before start (no-gossip clusters)
	mutate    func(*Config)
	// sameAddr reuses the raft address of a stopped node of this name, as
	// a real node restarted on its host would (with fresh in-memory
	// stores: an empty data directory).
	sameAddr bool
	// state, if set, is a stopped node whose raft stores the new node
	// takes over: a restart with the same data directory.
	state *haNode
	// raftCut starts the node with its raft transport connected to no
	// one (gossip and the internal RPC work); reconnectRaft heals it.
	raftCut bool
	// raftAt, if set, is the raft address to use (a node restarted at
	// another raft address).
	raftAt raft.ServerAddress
}

// add starts a node. Its raft transport is connected to every existing
// node's in both directions.
func (c *haCluster) add(name string, o haOpts) *haNode {
	c.t.Helper()
	n, err := c.addE(name, o)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// addE is add for use off the test goroutine.
func (c *haCluster) addE(name string, o haOpts) (*haNode, error) {
	t := c.t
	want := raft.ServerAddress("inmem-" + name)
	if o.raftAt != "" {
		want = o.raftAt
	}
	c.mu.Lock()
	if _, taken := c.trans[want]; taken && !o.sameAddr {
		want += raft.ServerAddress(fmt.Sprintf("-%d", len(c.trans)))
	}
	addr, tr := raft.NewInmemTransport(want)
	for oaddr, otr := range c.trans {
		if oaddr == addr || o.raftCut {
			continue
		}
		tr.Connect(oaddr, otr)
		otr.Connect(addr, tr)
	}
	c.trans[addr] = tr
	c.mu.Unlock()
	c.router.mu.Lock()
	c.router.names[addr] = name
	c.router.mu.Unlock()
	logs := &testlog.Buffer{}
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.DataDir = t.TempDir()
	cfg.Logger = logs.Logger()
	cfg.PeerName = c.router.peerName
	cfg.BootstrapExpect = o.expect
	cfg.APIAddr = "api-" + name + ":6443"
	cfg.ClusterID = c.clusterID
	cfg.ApplyTimeout = 5 * time.Second
	if o.gossip {
		cfg.GossipAddr = "127.0.0.1:0"
		if o.gossipAt != "" {
			cfg.GossipAddr = o.gossipAt
		}
		cfg.GossipKey = c.key
		cfg.Join = o.join
	}
	if o.mutate != nil {
		o.mutate(cfg)
	}
	store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	if o.state != nil {
		store, snaps = o.state.store, o.state.snaps
	}
	tuneGossip := fastGossip
	if c.tuneGossip != nil {
		tuneGossip = func(mc *memberlist.Config) {
			fastGossip(mc)
			c.tuneGossip(mc)
		}
	}
	d := deps{
		logs:        store,
		stable:      store,
		snaps:       snaps,
		trans:       tr,
		tune:        fastRaft,
		dialRPC:     c.router.dialer(addr),
		registerRPC: c.router.register(addr),
		tuneGossip:  tuneGossip,
		bootstrap:   o.bootstrap,
	}
	f := fsm.New()
	n, err := newNode(cfg, f, d)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the end of %s's log:\n%s", name, logs.Tail(6<<10))
		}
	})
	hn := &haNode{name: name, addr: addr, trans: tr, node: n, fsm: f, logs: logs, store: store, snaps: snaps}
	c.mu.Lock()
	c.nodes = append(c.nodes, hn)
	c.mu.Unlock()
	return hn, nil
}

// seed is the gossip address of the first node.
func (c *haCluster) seed() string { return c.nodes[0].node.gossipAddr() }

// startGossipCluster starts n nodes with BootstrapExpect n at the same
// moment, each told to join all of them.
func (c *haCluster) startGossipCluster(n int, mutate func(*Config)) {
	c.t.Helper()
	var addrs []string
	for range n {
		addrs = append(addrs, freeAddr(c.t))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := c.addE(fmt.Sprintf("node-%d", i), haOpts{expect: n, gossip: true, gossipAt: addrs[i], join: addrs, mutate: mutate})
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
	c.mu.Lock()
	slices.SortFunc(c.nodes, func(a, b *haNode) int { return strings.Compare(a.name, b.name) })
	c.mu.Unlock()
}

// running returns the nodes not shut down.
func (c *haCluster) running() []*haNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*haNode
	for _, n := range c.nodes {
		if n.node.ctx.Err() == nil {
			out = append(out, n)
		}
	}
	return out
}

// leader waits until exactly one running node is a read-ready leader that
// every running node in nodes agrees on.
func (c *haCluster) leader(nodes ...*haNode) *haNode {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.running()
	}
	var l *haNode
	waitFor(c.t, "a leader known to all nodes", func() bool {
		l = nil
		for _, n := range nodes {
			if n.node.readReady() {
				if l != nil {
					return false
				}
				l = n
			}
		}
		if l == nil {
			return false
		}
		for _, n := range nodes {
			if id, _ := n.node.Leader(); id != l.name {
				return false
			}
		}
		return true
	})
	return l
}

// leaderAndFollower waits for a leader every running node agrees on and
// returns it with a running node that follows it.
func (c *haCluster) leaderAndFollower() (l, f *haNode) {
	c.t.Helper()
	l = c.leader()
	for _, n := range c.running() {
		if n != l {
			return l, n
		}
	}
	c.t.Fatal("no running follower")
	return nil, nil
}

// voters returns the sorted voter IDs in n's configuration.
func voters(n *Node) []string {
	fut := n.raft.GetConfiguration()
	if fut.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range fut.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	slices.Sort(out)
	return out
}

// waitVoters waits until every node in nodes has exactly want as voters.
func waitVoters(t *testing.T, want []string, nodes ...*haNode) {
	t.Helper()
	slices.Sort(want)
	waitFor(t, fmt.Sprintf("voters %v on every node", want), func() bool {
		for _, n := range nodes {
			if !slices.Equal(voters(n.node), want) {
				return false
			}
		}
		return true
	})
}

func (n *haNode) propose(t *testing.T, ctx context.Context, name string) uint64 {
	t.Helper()
	res, err := n.node.Propose(ctx, putCmd(name, "v"))
	if err != nil || res.Err != nil {
		t.Fatalf("Propose %s on %s: %v %v", name, n.name, err, res)
	}
	return res.Revision
}

// memberStatus returns n's gossip status of name ("" if unknown).
func memberStatus(n *Node, name string) string {
	if n.gossip == nil {
		return ""
	}
	m, ok := n.gossip.snapshot()[name]
	if !ok {
		return ""
	}
	return m.status
}

func isNoLeaderOrTimeout(err error) bool {
	return errors.Is(err, ErrNoLeader) || errors.Is(err, ErrTimeout)
}

// disconnect cuts raft traffic and the internal RPC between a and b.
func (c *haCluster) disconnect(a, b *haNode) {
	a.trans.Disconnect(b.addr)
	b.trans.Disconnect(a.addr)
	c.router.partition(a.addr, b.addr, true)
}

// reconnectRaft connects n's raft transport to every other node's, both
// ways (after haOpts.raftCut or a disconnect).
func (c *haCluster) reconnectRaft(n *haNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for oaddr, otr := range c.trans {
		if oaddr == n.addr {
			continue
		}
		n.trans.Connect(oaddr, otr)
		otr.Connect(n.addr, n.trans)
	}
}

// disconnectRaft cuts n's raft transport from every other node's, both
// ways; gossip and the internal RPC are untouched.
func (c *haCluster) disconnectRaft(n *haNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for oaddr, otr := range c.trans {
		if oaddr == n.addr {
			continue
		}
		n.trans.Disconnect(oaddr)
		otr.Disconnect(n.addr)
	}
}
