package e2e_test

import (
	"context"
	"encoding/json"
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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustplane/trustplane/api"
)

// members reads the cluster view of n through the operator endpoint.
func (n *node) members() ([]api.Member, error) {
	resp, err := n.httpClient().Get(n.url() + "/debug/trustplane/members")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("members: %s", resp.Status)
	}
	var ms []api.Member
	return ms, json.NewDecoder(resp.Body).Decode(&ms)
}

// leaderOf waits (bounded) until the nodes agree on one leader among them.
func leaderOf(t testing.TB, nodes []*node) *node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			ms, err := n.members()
			if err != nil {
				continue
			}
			for _, m := range ms {
				if m.RaftState != "Leader" {
					continue
				}
				for _, c := range nodes {
					if c.name == m.Name {
						return c
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the cluster agreed on no leader within 30s")
	return nil
}

func followersOf(nodes []*node, leader *node) []*node {
	var out []*node
	for _, n := range nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

// pause and resume freeze and thaw the process (SIGSTOP / SIGCONT).
func (n *node) pause()  { n.rawSignal(syscall.SIGSTOP) }
func (n *node) resume() { n.rawSignal(syscall.SIGCONT) }

func (n *node) rawSignal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		n.cmd.Process.Signal(sig)
	}
}

func createSA(cs kubernetes.Interface, name string) (*corev1.ServiceAccount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
}

func getSA(cs kubernetes.Interface, name, rv string) (*corev1.ServiceAccount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return cs.CoreV1().ServiceAccounts("default").Get(ctx, name, metav1.GetOptions{ResourceVersion: rv})
}

// TestClusterFormsAndReplicates: three processes started at once form one
// cluster; a write on any node reads back linearizably on every node, with
// the same resourceVersion everywhere.
func TestClusterFormsAndReplicates(t *testing.T) {
	nodes := startCluster(t, 3)
	ms, err := nodes[0].members()
	if err != nil {
		t.Fatal(err)
	}
	voters, leaders := 0, 0
	for _, m := range ms {
		if m.Voter {
			voters++
		}
		if m.RaftState == "Leader" {
			leaders++
		}
	}
	if len(ms) != 3 || voters != 3 || leaders != 1 {
		t.Fatalf("members = %+v; want 3 voters and 1 leader", ms)
	}
	for i, writer := range nodes {
		name := fmt.Sprintf("from-%s", writer.name)
		created, err := createSA(writer.clientset(), name)
		if err != nil {
			t.Fatalf("create on %s: %v", writer.name, err)
		}
		for _, reader := range nodes {
			got, err := getSA(reader.clientset(), name, "")
			if err != nil {
				t.Fatalf("linearizable read on %s of a write on node %d: %v", reader.name, i, err)
			}
			if got.ResourceVersion != created.ResourceVersion || got.UID != created.UID {
				t.Fatalf("%s sees rv %s uid %s, the write returned rv %s uid %s",
					reader.name, got.ResourceVersion, got.UID, created.ResourceVersion, created.UID)
			}
		}
	}
}

// TestLeaderKillLosesNoAcknowledgedWrite kills the leader with SIGKILL during
// a write load spread over every node; every acknowledged write must survive
// and writes must resume on the new leader.
func TestLeaderKillLosesNoAcknowledgedWrite(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	clients := make([]kubernetes.Interface, len(nodes))
	for i, n := range nodes {
		clients[i] = n.clientset()
	}
	var (
		mu        sync.Mutex
		acked     []string
		afterKill int
		killed    = make(chan struct{})
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	// The load is bounded twice: by the stop signal below and by a count.
	const writers, maxPerWriter = 6, 5000
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < maxPerWriter; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				c := clients[(w+i)%len(clients)]
				if _, err := createSA(c, name); err != nil {
					continue // not acknowledged: may or may not exist
				}
				mu.Lock()
				acked = append(acked, name)
				select {
				case <-killed:
					afterKill++
				default:
				}
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond)
	leader.kill()
	close(killed)
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()

	survivors := followersOf(nodes, leader)
	if afterKill == 0 {
		t.Fatalf("no write was acknowledged after the leader was killed (%d before)", len(acked))
	}
	leader.start()
	leader.waitReady(90 * time.Second)
	for _, n := range append(survivors, leader) {
		cs := n.clientset()
		list, err := cs.CoreV1().ServiceAccounts("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list on %s: %v", n.name, err)
		}
		have := map[string]bool{}
		for _, sa := range list.Items {
			have[sa.Name] = true
		}
		for _, name := range acked {
			if !have[name] {
				t.Fatalf("%s lost acknowledged write %s (%d acknowledged, %d after the kill)", n.name, name, len(acked), afterKill)
			}
		}
	}
	t.Logf("%d writes acknowledged, %d after the leader kill; none lost", len(acked), afterKill)
}

// TestFollowerKillAndCatchUp: killing a follower does not stop writes; the
// follower restarts and catches up, by snapshot install when the leader has
// compacted its log past the follower's position.
func TestFollowerKillAndCatchUp(t *testing.T) {
	nodes := startCluster(t, 3, "--raft-snapshot-threshold", "64", "--raft-trailing-logs", "16", "--raft-snapshot-interval", "1s")
	leader := leaderOf(t, nodes)
	follower := followersOf(nodes, leader)[0]
	follower.kill()
	cs := leader.clientset()
	var last *corev1.ServiceAccount
	for i := 0; i < 400; i++ {
		sa, err := createSA(cs, fmt.Sprintf("while-down-%d", i))
		if err != nil {
			t.Fatalf("write %d with a follower down: %v", i, err)
		}
		last = sa
	}
	// Let the leader snapshot and compact past the dead follower's log.
	time.Sleep(3 * time.Second)
	follower.start()
	follower.waitReady(90 * time.Second)
	got, err := getSA(follower.clientset(), last.Name, last.ResourceVersion)
	if err != nil {
		t.Fatalf("restarted follower did not catch up to rv %s: %v\n%s", last.ResourceVersion, err, follower.logTail())
	}
	if got.ResourceVersion != last.ResourceVersion {
		t.Fatalf("rv on restarted follower = %s, want %s", got.ResourceVersion, last.ResourceVersion)
	}
	// The leader kept only 16 trailing entries, so the follower can only
	// have caught up by installing the leader's snapshot. Raft logs that
	// just after the fsm restore the read above waited for.
	waitFor(t, 10*time.Second, "the follower to log that it installed the leader's snapshot", func() bool {
		return strings.Contains(follower.fullLog(), "Installed remote snapshot")
	})
}

// TestWriteWithoutQuorumIs503: with two of three nodes dead no leader can be
// elected; a write waits the bounded time for one and then gets 503 with
// Retry-After and a Status saying why, while RV=0 reads still work.
func TestWriteWithoutQuorumIs503(t *testing.T) {
	nodes := startCluster(t, 3, "--write-leader-wait", "2s")
	leader := leaderOf(t, nodes)
	followers := followersOf(nodes, leader)
	survivor := followers[0]
	sa, err := createSA(survivor.clientset(), "before-quorum-loss")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := getSA(survivor.clientset(), sa.Name, sa.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	leader.kill()
	followers[1].kill()

	body := strings.NewReader(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"no-quorum"}}`)
	req, _ := http.NewRequest(http.MethodPost, survivor.url()+"/api/v1/namespaces/default/serviceaccounts", body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := survivor.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st metav1.Status
	json.NewDecoder(resp.Body).Decode(&st)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || st.Kind != "Status" || st.Code != 503 {
		t.Fatalf("write without quorum: %s, Retry-After %q, status %+v", resp.Status, resp.Header.Get("Retry-After"), st)
	}
	if _, err := getSA(survivor.clientset(), sa.Name, "0"); err != nil {
		t.Fatalf("RV=0 read without quorum: %v", err)
	}
}

// TestFrozenLeader: a leader frozen with SIGSTOP serves no linearizable read;
// RV=0 reads on the healthy nodes keep working, and after the election the
// healthy nodes serve linearizable reads again.
func TestFrozenLeader(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	sa, err := createSA(leader.clientset(), "before-freeze")
	if err != nil {
		t.Fatal(err)
	}
	// RV=0 reads may be stale: make sure each follower has applied the
	// write (a "not older than" read) before the leader goes away.
	for _, f := range followersOf(nodes, leader) {
		if _, err := getSA(f.clientset(), sa.Name, sa.ResourceVersion); err != nil {
			t.Fatalf("%s did not apply rv %s: %v", f.name, sa.ResourceVersion, err)
		}
	}
	leader.pause()
	defer leader.resume()

	for _, f := range followersOf(nodes, leader) {
		if _, err := getSA(f.clientset(), sa.Name, "0"); err != nil {
			t.Fatalf("RV=0 read on healthy %s while the leader is frozen: %v", f.name, err)
		}
	}
	cfg := leader.restConfig()
	cfg.Timeout = 3 * time.Second
	frozen := kubernetes.NewForConfigOrDie(cfg)
	if _, err := frozen.CoreV1().ServiceAccounts("default").Get(context.Background(), sa.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("a frozen node answered a linearizable read")
	}
	healthy := followersOf(nodes, leader)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := getSA(healthy[0].clientset(), sa.Name, "")
		if err == nil {
			break
		}
		if apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("linearizable read after the election on %s: %v", healthy[0].name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitMembers polls n's member list (bounded) until cond holds.
func waitMembers(t *testing.T, n *node, what string, cond func([]api.Member) bool) []api.Member {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last []api.Member
	for time.Now().Before(deadline) {
		if ms, err := n.members(); err == nil {
			last = ms
			if cond(ms) {
				return ms
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("members never showed %s; last view: %+v", what, last)
	return nil
}

func member(ms []api.Member, name string) (api.Member, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return api.Member{}, false
}

// joiner starts an extra node that joins the cluster of nodes through
// gossip, with its own CA directory (the cluster's unless caDir is given)
// and any extra serve flags.
func joiner(t *testing.T, nodes []*node, name, caDir string, extra ...string) *node {
	t.Helper()
	var seeds []string
	for _, n := range nodes {
		for i, a := range n.args {
			if a == "--gossip-addr" {
				seeds = append(seeds, n.args[i+1])
			}
		}
	}
	if caDir == "" {
		caDir = nodes[0].caDir
	}
	j := &node{
		t: t, name: name, dir: t.TempDir(), caDir: caDir, listen: freePort(t), raftAddr: freePort(t),
		args: append([]string{"--ca-dir", caDir, "--gossip-addr", freePort(t), "--join", strings.Join(seeds, ",")}, extra...),
	}
	j.start()
	t.Cleanup(j.kill)
	return j
}

// TestMembership: a later joiner becomes a voter; SIGTERM makes a node
// started with --leave-on-terminate leave and be removed; a killed node stays a voter until "trustplane members
// remove" (sent through a follower); nodes with another CA or another gossip key are refused and the
// cluster is unharmed.
func TestMembership(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	nodes := startCluster(t, 3)

	n4 := joiner(t, nodes, "n4", "", "--leave-on-terminate")
	n4.waitReady(90 * time.Second)
	waitMembers(t, nodes[0], "n4 as a voter", func(ms []api.Member) bool {
		m, ok := member(ms, "n4")
		return ok && m.Voter
	})

	n4.stop() // SIGTERM with --leave-on-terminate: leave gracefully
	waitMembers(t, nodes[0], "n4 removed after leaving", func(ms []api.Member) bool {
		m, ok := member(ms, "n4")
		return !ok || (!m.Voter && m.Status == "left")
	})

	leader := leaderOf(t, nodes)
	dead := followersOf(nodes, leader)[1]
	dead.kill()
	waitMembers(t, leader, dead.name+" failed but still a voter", func(ms []api.Member) bool {
		m, ok := member(ms, dead.name)
		return ok && m.Voter && m.Status == "failed"
	})
	// Sent to the live follower: only the leader removes another member,
	// so the follower forwards the request to it.
	live := followersOf(nodes, leader)[0]
	out, err := exec.Command(binPath, "members", "--kubeconfig", live.kubeconfigPath(), "remove", dead.name).CombinedOutput()
	if err != nil {
		t.Fatalf("trustplane members remove %s: %v\n%s", dead.name, err, out)
	}
	waitMembers(t, leader, dead.name+" removed", func(ms []api.Member) bool {
		m, ok := member(ms, dead.name)
		return !ok || !m.Voter
	})
	if _, err := createSA(leader.clientset(), "after-removal"); err != nil {
		t.Fatalf("write after removing a dead voter: %v", err)
	}

	// Intruders: another CA (so another cluster ID), and the right CA with
	// another gossip key.
	otherCA := t.TempDir()
	if out, err := exec.Command(binPath, "certs", "init", "--dir", otherCA).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	wrongKey := t.TempDir()
	for _, f := range []string{"ca.crt", "ca.key", "node-ca.crt", "node-ca.key"} {
		b, err := os.ReadFile(filepath.Join(nodes[0].caDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wrongKey, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(wrongKey, "gossip.key"),
		[]byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	x1 := joiner(t, nodes, "x1", otherCA)
	x2 := joiner(t, nodes, "x2", wrongKey)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && !(strings.Contains(x1.fullLog(), "refus") && strings.Contains(x2.fullLog(), "key")) {
		time.Sleep(200 * time.Millisecond)
	}
	ms, err := leader.members()
	if err != nil {
		t.Fatal(err)
	}
	for _, intruder := range []string{"x1", "x2"} {
		if m, ok := member(ms, intruder); ok && m.Voter {
			t.Fatalf("intruder %s became a voter: %+v", intruder, ms)
		}
	}
	for _, x := range []*node{x1, x2} {
		if log := x.fullLog(); !strings.Contains(strings.ToLower(log), "refus") && !strings.Contains(strings.ToLower(log), "key") {
			t.Errorf("%s logged no clear refusal:\n%s", x.name, x.logTail())
		}
	}
	if _, err := createSA(leader.clientset(), "after-intruders"); err != nil {
		t.Fatalf("write after intruders tried to join: %v", err)
	}
}
