package e2e_test

import (
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/faultproxy"
	"github.com/trustplane/trustplane/internal/freeport"
)

// proxiedNode is a real trustplane process on its own loopback IP whose
// peers reach it only through fault proxies: every address it advertises
// (raft, gossip TCP and UDP, API) is a proxy's, and every connection it
// opens starts from its IP, so the proxies can cut it off per peer.
type proxiedNode struct {
	*node
	ip    string // 127.0.0.(10+i): what the node binds and dials from
	apiIP string // 127.0.0.(20+i): the API proxy (--advertise-address)
	proxy *faultproxy.Node
}

// freePortOn returns ip:port, a port that was free on ip a moment ago for
// TCP and, when udp, for UDP as well; never one handed out before.
func freePortOn(t testing.TB, ip string, udp bool) string {
	t.Helper()
	// Below the ephemeral range: a node killed and restarted must find
	// its port free, which a client connection's local port could take.
	addr, err := freeport.On(ip, udp, func(addr string) bool {
		_, taken := handedOut.LoadOrStore(addr, true)
		return taken
	})
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startProxiedCluster starts size nodes, node i (from 1) on 127.0.0.(10+i)
// with its API proxy on 127.0.0.(20+i), each behind fault proxies, joined
// through the gossip proxies, and waits until all are ready. Proxies and
// processes are stopped when the test ends.
func startProxiedCluster(t testing.TB, size int, extraArgs ...string) []*proxiedNode {
	t.Helper()
	skipExternal(t, size)
	if size > 9 {
		t.Fatal("at most 9 proxied nodes")
	}
	if runtime.GOOS != "linux" {
		// Linux routes all of 127/8 to lo; elsewhere (macOS) each address
		// needs an alias first: ifconfig lo0 alias 127.0.0.11 up, and so on.
		if l, err := net.Listen("tcp", "127.0.0.21:0"); err != nil {
			t.Skipf("loopback addresses beyond 127.0.0.1 are not configured here: %v", err)
		} else {
			l.Close()
		}
	}
	caDir := t.TempDir()
	if out, err := exec.Command(binPath, "certs", "init", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	nodes := make([]*proxiedNode, size)
	join := make([]string, size)
	for i := range nodes {
		ip := fmt.Sprintf("127.0.0.%d", 11+i)
		apiIP := fmt.Sprintf("127.0.0.%d", 21+i)
		listen := freePortOn(t, ip, false)
		raftAddr := freePortOn(t, ip, false)
		gossipAddr := freePortOn(t, ip, true)
		_, apiPort, _ := net.SplitHostPort(listen)
		proxy, err := faultproxy.ListenNode(faultproxy.NodeConfig{
			IP: ip, Raft: raftAddr, Gossip: gossipAddr,
			// --advertise-address is a host: the API proxy keeps the port.
			API: listen, APIListen: net.JoinHostPort(apiIP, apiPort),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		p := &proxiedNode{ip: ip, apiIP: apiIP, proxy: proxy}
		join[i] = proxy.GossipAddr()
		p.node = &node{
			t: t, name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), caDir: caDir,
			listen: listen, raftAddr: raftAddr,
			args: []string{
				"--ca-dir", caDir, "--gossip-addr", gossipAddr,
				"--raft-advertise-addr", proxy.RaftAddr(),
				"--gossip-advertise-addr", proxy.GossipAddr(),
				"--advertise-address", apiIP,
				"--bootstrap-expect", strconv.Itoa(size),
			},
		}
		nodes[i] = p
	}
	for _, p := range nodes {
		p.args = append(p.args, append([]string{"--join", strings.Join(join, ",")}, extraArgs...)...)
		p.start()
		t.Cleanup(p.kill) // registered after the proxies' Close, so it runs first
	}
	for _, p := range nodes {
		p.waitReady(90 * time.Second)
	}
	return nodes
}

// isolate cuts cut off from the rest of cluster: each side drops the
// other's IP on its own proxies. heal undoes it; it may be called again
// (deferred, and once the test is done with the partition).
func isolate(cluster []*proxiedNode, cut *proxiedNode) (heal func()) {
	for _, p := range cluster {
		if p != cut {
			p.proxy.SetRule(cut.ip, faultproxy.Rule{Drop: true})
			cut.proxy.SetRule(p.ip, faultproxy.Rule{Drop: true})
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, p := range cluster {
				p.proxy.ClearRules()
			}
		})
	}
}
