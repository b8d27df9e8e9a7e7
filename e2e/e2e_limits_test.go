package e2e_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestE2ELimitsPatchAmplification: a JSON patch whose copies would grow an
// object exponentially, and patches that grow an object past the stored
// size limit, are refused with a 4xx before anything reaches the log; the
// node stays ready. The size limit is lowered to 512 KiB, because
// ConfigMap validation caps data at 1 MiB, below the 1.5 MiB default.
func TestE2ELimitsPatchAmplification(t *testing.T) {
	n := startNode(t, "--controllers=false", "--max-object-bytes", "512Ki")
	const tooLarge = "Request entity too large: limit is 524288"
	c := n.httpClient()
	cm := n.url() + "/api/v1/namespaces/default/configmaps"
	seed := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "seed"},
		"data":     map[string]string{"a": strings.Repeat("x", 16<<10)},
	}
	body, _ := json.Marshal(seed)
	if r := do(t, c, http.MethodPost, cm, jsonHeader("application/json"), body); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	before := n.snapshot(t, "configmaps")
	rssBefore := n.rssBytes(t)
	started := time.Now()

	t.Run("a doubling JSON patch copy is 422 once it has copied 3 MiB", func(t *testing.T) {
		// /data copied into itself 64 times: 16 KiB * 2^64 without a bound.
		var ops []string
		for i := range 64 {
			ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/data","path":"/data/d%d"}`, i))
		}
		r := do(t, c, http.MethodPatch, cm+"/seed", jsonHeader("application/json-patch+json"), []byte("["+strings.Join(ops, ",")+"]"))
		// kube's answer to any JSON patch that fails to apply: a generic
		// 422 (json-patch's AccumulatedCopySizeError is not shown).
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the server rejected our request due to an error in our request")
	})
	t.Run("JSON patch copies within the copy bound that grow the object past the limit are 413", func(t *testing.T) {
		// Three copies of 200 KiB: 600 KiB copied (under 3 MiB), 816 KiB stored.
		big := fmt.Sprintf(`[{"op":"add","path":"/data/b","value":%q}`, strings.Repeat("y", 200<<10))
		for i := range 3 {
			big += fmt.Sprintf(`,{"op":"copy","from":"/data/b","path":"/data/b%d"}`, i)
		}
		r := do(t, c, http.MethodPatch, cm+"/seed", jsonHeader("application/json-patch+json"), []byte(big+"]"))
		wantStatus(t, r, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, tooLarge)
	})
	t.Run("a merge patch that grows the object past the limit is 413", func(t *testing.T) {
		patch := fmt.Sprintf(`{"data":{"big":%q}}`, strings.Repeat("z", 600<<10))
		r := do(t, c, http.MethodPatch, cm+"/seed", jsonHeader("application/merge-patch+json"), []byte(patch))
		wantStatus(t, r, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, tooLarge)
	})
	t.Run("a create past the limit is 413", func(t *testing.T) {
		huge := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"huge"},"data":{"a":%q}}`, strings.Repeat("z", 600<<10))
		r := do(t, c, http.MethodPost, cm, jsonHeader("application/json"), []byte(huge))
		wantStatus(t, r, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, tooLarge)
	})
	// Memory, not time, is asserted: unbounded, the doubling copy alone
	// would need 16 KiB * 2^64. The figures are logged for the record.
	rssAfter := n.rssBytes(t)
	t.Logf("the four refusals took %v; resident memory %d MiB -> %d MiB", time.Since(started).Round(time.Millisecond), rssBefore>>20, rssAfter>>20)
	if growth := rssAfter - rssBefore; growth > 256<<20 {
		t.Fatalf("resident memory grew by %d MiB while refusing the amplifying requests", growth>>20)
	}
	sameSnapshot(t, before, n.snapshot(t, "configmaps"))
	n.mustBeReady(t)
}

// rssBytes is the node process's resident memory (VmRSS, Linux).
func (n *node) rssBytes(t *testing.T) int64 {
	t.Helper()
	pid := n.pid()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc status for the node: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb); err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// bindClusterAdmin makes user a cluster-admin through RBAC, without
// system:masters: such a user is subject to the in-flight limits.
func bindClusterAdmin(t *testing.T, n *node, user string) {
	t.Helper()
	crb := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"limits-%s"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},
		"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":%q}]}`, user, user)
	r := do(t, n.httpClient(), http.MethodPost, n.url()+"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", jsonHeader("application/json"), []byte(crb))
	if r.code != http.StatusCreated {
		t.Fatalf("binding %s: %d %s", user, r.code, r.body)
	}
}

// clientFor is a raw HTTPS client for cfg.
func clientFor(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// TestE2ELimitsMaxInFlight: with --max-requests-inflight 2 and
// --max-mutating-requests-inflight 1, requests beyond the limit get kube's
// 429 while slow ones run; system:masters and health probes still get
// through; and watches beyond --max-watches get 429.
func TestE2ELimitsMaxInFlight(t *testing.T) {
	n := startNode(t, "--controllers=false", "--max-requests-inflight", "2", "--max-mutating-requests-inflight", "1",
		"--max-watches", "8", "--request-timeout", "20s")
	bindClusterAdmin(t, n, "busy")
	busyCfg := n.userConfig(t, "busy")
	busy := clientFor(t, busyCfg)
	list := n.url() + "/api/v1/namespaces/default/configmaps"

	// Two loops of reads of a resourceVersion far in the future, each of
	// which waits the bounded fresh wait (3s) before its 504, keep the
	// read slots full.
	stopReads := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stopReads); wg.Wait() }()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				select {
				case <-stopReads:
					return
				default:
				}
				resp, err := busy.Get(list + "?resourceVersion=999999999&resourceVersionMatch=NotOlderThan")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	// A trickled write fills the one mutating slot.
	tcfg, err := rest.TLSConfigFor(busyCfg)
	if err != nil {
		t.Fatal(err)
	}
	stopTrickle := make(chan struct{})
	trickleDone := make(chan bool, 1)
	go func() {
		// The server ends a trickled write at its request deadline (20s),
		// which frees the slot: start the next one at once, so that a slow
		// machine's read phase cannot outlast the write that fills the
		// slot. Each trickle's budget is beyond the deadline, so that it is
		// the server that ends it; a trickle that ends otherwise (a failed
		// dial under load) is followed by the next too. Bounded by stop,
		// the budget and the count.
		answered := false
		for range 20 {
			answered = trickle(n.listen, tcfg, "/api/v1/namespaces/default/configmaps", 100*time.Millisecond, 30*time.Second, stopTrickle)
			select {
			case <-stopTrickle:
				trickleDone <- answered
				return
			default:
			}
		}
		trickleDone <- answered
	}()
	defer func() { close(stopTrickle); <-trickleDone }()

	tooMany := func(method string, body []byte) bool {
		r := do(t, busy, method, list, jsonHeader("application/json"), body)
		if r.code != http.StatusTooManyRequests {
			return false
		}
		if r.header.Get("Retry-After") != "1" || strings.TrimSpace(string(r.body)) != "Too many requests, please try again later." {
			t.Fatalf("429 Retry-After %q: %s", r.header.Get("Retry-After"), r.body)
		}
		return true
	}
	waitFor(t, 10*time.Second, "a read beyond the limit to get 429", func() bool { return tooMany(http.MethodGet, nil) })
	// Under a loaded CI machine a trickled write can end (its body-read
	// deadline) and the next one take seconds to reach the slot: wait
	// longer for the write than for the read, whose slots stay full.
	waitFor(t, 30*time.Second, "a write beyond the limit to get 429", func() bool {
		return tooMany(http.MethodPost, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"x-"}}`))
	})
	// kube's filter always answers system:masters, and probes are exempt.
	if r := do(t, n.httpClient(), http.MethodGet, list, nil, nil); r.code != http.StatusOK {
		t.Fatalf("system:masters read while full: %d %s", r.code, r.body)
	}
	n.mustBeReady(t)

	// Watches are long-running: not counted in flight, but capped.
	var watches []io.Closer
	defer func() {
		for _, w := range watches {
			w.Close()
		}
	}()
	admin := n.httpClient()
	admin.Timeout = 0
	var capped *httpResult
	for i := 0; i < 20 && capped == nil; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, list+"?watch=true", nil)
		resp, err := admin.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			watches = append(watches, closer(func() error { cancel(); return resp.Body.Close() }))
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		capped = &httpResult{code: resp.StatusCode, header: resp.Header, body: b}
	}
	if capped == nil || len(watches) > 8 {
		t.Fatalf("%d watches open and none refused with --max-watches 8", len(watches))
	}
	wantStatus(t, *capped, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "too many watches on this server (limit 8), please try again later")
}

type closer func() error

func (c closer) Close() error { return c() }

// trickle sends a POST to path whose body it sends one byte every interval,
// until the server answers or closes the connection (true), or budget
// passes or stop is closed (false).
func trickle(addr string, cfg *tls.Config, path string, every, budget time.Duration, stop <-chan struct{}) bool {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: cfg}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", path, addr)
	answered := make(chan struct{})
	go func() {
		// Any answer (a 504 or 400) or a close ends the request.
		_, _ = bufio.NewReader(c).ReadByte()
		close(answered)
	}()
	end := time.After(budget)
	for {
		select {
		case <-answered:
			return true
		case <-stop:
			return false
		case <-end:
			return false
		case <-time.After(every):
			if _, err := c.Write([]byte(" ")); err != nil {
				<-answered
				return true
			}
		}
	}
}

// TestE2ELimitsSlowClientsAndIdleRaftConnections: 300 clients trickling
// request bodies into the leader's API and 300 TCP connections that never
// start a TLS handshake on the raft ports (100 per node, beyond the bound
// of 32 pending handshakes) neither stop writes and probes nor disturb
// Raft: no node starts an election.
func TestE2ELimitsSlowClientsAndIdleRaftConnections(t *testing.T) {
	nodes := startCluster(t, 3, "--controllers=false", "--request-timeout", "4s", "--tls-handshake-timeout", "3s",
		"--raft-max-pending-handshakes", "32")
	leader := leaderOf(t, nodes)
	// Count elections from when every node follows the same leader, so
	// that a late vote of the cluster's formation is not counted.
	waitFor(t, 30*time.Second, "every node to see "+leader.name+" lead", func() bool {
		for _, n := range nodes {
			ms, err := n.members()
			if err != nil {
				return false
			}
			for _, m := range ms {
				if (m.RaftState == "Leader") != (m.Name == leader.name) {
					return false
				}
			}
		}
		return true
	})
	elections := func() int {
		total := 0
		for _, n := range nodes {
			total += strings.Count(n.fullLog(), "entering candidate state")
		}
		return total
	}
	electionsBefore := elections()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var idleClosed, idleOpened atomic.Int32
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", nodes[i%3].raftAddr, 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			idleOpened.Add(1)
			closed := make(chan struct{})
			go func() { _, _ = c.Read(make([]byte, 1)); close(closed) }()
			select {
			case <-closed:
				idleClosed.Add(1)
			case <-stop:
			case <-time.After(20 * time.Second):
			}
		}()
	}
	tcfg, err := rest.TLSConfigFor(leader.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	var cut atomic.Int32
	for range 300 {
		time.Sleep(2 * time.Millisecond) // 300 handshakes over ~1s, not in one instant
		wg.Add(1)
		go func() {
			defer wg.Done()
			if trickle(leader.listen, tcfg, "/api/v1/namespaces/default/configmaps", 200*time.Millisecond, 20*time.Second, stop) {
				cut.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	// Meanwhile other clients write and probe, through the leader and a
	// follower (which forwards).
	c := leader.httpClient()
	for i := range 10 {
		for _, n := range []*node{leader, followersOf(nodes, leader)[0]} {
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"during-%s-%d"}}`, n.name, i)
			r := do(t, c, http.MethodPost, n.url()+"/api/v1/namespaces/default/configmaps", jsonHeader("application/json"), []byte(body))
			if r.code != http.StatusCreated {
				t.Fatalf("write %d through %s during the flood: %d %s", i, n.name, r.code, r.body)
			}
		}
		for _, n := range nodes {
			n.mustBeReady(t)
		}
		time.Sleep(300 * time.Millisecond)
	}
	waitFor(t, 30*time.Second, "the trickling clients to be cut off", func() bool { return cut.Load() >= 290 })
	waitFor(t, 30*time.Second, "the idle raft connections to be closed", func() bool { return idleClosed.Load() >= idleOpened.Load()-5 })
	if got := elections(); got != electionsBefore {
		var raftLines []string
		for _, n := range nodes {
			for _, l := range strings.Split(n.fullLog(), "\n") {
				if strings.Contains(l, "raft") && !strings.Contains(l, "level=DEBUG") {
					raftLines = append(raftLines, n.name+": "+l)
				}
			}
		}
		t.Fatalf("%d elections started during the flood:\n%s", got-electionsBefore, strings.Join(raftLines, "\n"))
	}
	if l := leaderOf(t, nodes); l != leader {
		t.Fatalf("leadership moved from %s to %s", leader.name, l.name)
	}

	// An amplifying patch sent to a follower is refused by the leader it is
	// forwarded to, and every node stays ready.
	ops := []string{fmt.Sprintf(`{"op":"add","path":"/data","value":{"s":%q}}`, strings.Repeat("x", 1<<10))}
	for i := range 64 {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/data","path":"/data/k%d"}`, i))
	}
	f := followersOf(nodes, leader)[0]
	r := do(t, c, http.MethodPatch, f.url()+"/api/v1/namespaces/default/configmaps/during-"+leader.name+"-0",
		jsonHeader("application/json-patch+json"), []byte("["+strings.Join(ops, ",")+"]"))
	if r.code != http.StatusUnprocessableEntity {
		t.Fatalf("a doubling copy patch through follower %s: %d %s, want 422 (the copy bound)", f.name, r.code, r.body)
	}
	for _, n := range nodes {
		n.mustBeReady(t)
	}
}
