package e2e_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestAdvertiseAddress: three nodes that listen on every interface and
// advertise distinct loopback addresses (127.0.0.2-4). Peers record the
// advertised API and Raft addresses, not 127.0.0.1; each node's serving
// certificate names its advertised address; and a write sent to a
// follower's advertised address reaches the leader. Traffic goes to
// loopback addresses only.
func TestAdvertiseAddress(t *testing.T) {
	skipExternal(t, 3)
	caDir := t.TempDir()
	if out, err := exec.Command(binPath, "certs", "init", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	const size = 3
	port := func() string { _, p, _ := net.SplitHostPort(freePort(t)); return p }
	type ports struct{ api, raft, gossip string }
	ps := make([]ports, size)
	seeds := make([]string, size)
	for i := range ps {
		ps[i] = ports{port(), port(), port()}
		seeds[i] = net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i+2), ps[i].gossip)
	}
	nodes := make([]*node, size)
	for i := range nodes {
		ip := fmt.Sprintf("127.0.0.%d", i+2)
		nodes[i] = &node{
			t: t, name: fmt.Sprintf("a%d", i+1), dir: t.TempDir(), caDir: caDir,
			// url() and the harness use the advertised address; the flags
			// after it (the last value wins) bind every interface.
			listen: net.JoinHostPort(ip, ps[i].api), raftAddr: net.JoinHostPort(ip, ps[i].raft),
			args: []string{
				"--listen", "0.0.0.0:" + ps[i].api, "--raft-addr", "0.0.0.0:" + ps[i].raft, "--gossip-addr", "0.0.0.0:" + ps[i].gossip,
				"--advertise-address", ip, "--ca-dir", caDir,
				"--bootstrap-expect", fmt.Sprint(size), "--join", strings.Join(seeds, ","), "--controllers=false",
			},
		}
		nodes[i].start()
		t.Cleanup(nodes[i].kill)
	}
	for _, n := range nodes {
		n.waitReady(90 * time.Second)
	}

	leader := leaderOf(t, nodes)
	var ms []struct{ name, api, raft string }
	waitFor(t, 30*time.Second, "every member with its advertised addresses", func() bool {
		got, err := leader.members()
		if err != nil || len(got) != size {
			return false
		}
		ms = ms[:0]
		for _, m := range got {
			ms = append(ms, struct{ name, api, raft string }{m.Name, m.APIAddr, m.RaftAddr})
		}
		return true
	})
	for _, m := range ms {
		var want *node
		for _, n := range nodes {
			if n.name == m.name {
				want = n
			}
		}
		if want == nil || m.api != want.listen || m.raft != want.raftAddr {
			t.Fatalf("member %s advertises API %q and Raft %q; want %q and %q", m.name, m.api, m.raft, want.listen, want.raftAddr)
		}
	}

	// A write to each follower's advertised address (the serving
	// certificate must name it) is forwarded to the leader.
	for i, f := range followersOf(nodes, leader) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("via-follower-%d", i), Namespace: "default"}}
		cfg := f.restConfig()
		cfg.Host = f.url()
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("write through follower %s at %s: %v", f.name, f.url(), err)
		}
		if _, err := leader.clientset().CoreV1().ConfigMaps("default").Get(context.Background(), cm.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("the leader lacks %s: %v", cm.Name, err)
		}
	}
}
