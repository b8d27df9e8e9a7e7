package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/api"
)

// BenchmarkElectionsUnderCPUSaturation (issue 12, point 2): three real
// nodes, 16 writers creating ConfigMaps through all nodes, and CPU hogs
// (busy shell loops at the nodes' priority) saturating the machine, for a
// fixed duration. It counts the elections the cluster went through, from
// every node's GET /debug/trustplane/raft, and reports them with the write
// rate and latency. It asserts nothing about either: run it by hand with
// -benchtime 1x and record the figures (docs/BENCHMARKS.md).
//
// TRUSTPLANE_BENCH_DURATION (default 60s) sets the duration and
// TRUSTPLANE_BENCH_HOGS (default 2, one per core here) the number of hogs.
//
// Metrics: elections is the term's rise (every election, won or split,
// raises it; pre-vote rounds that fail do not); candidacies is the sum
// over nodes of the times each became a candidate (pre-vote rounds
// included: each one is a follower whose heartbeat timer expired);
// leader-changes is the most leader changes any node saw; max-contact-ms
// is the longest a follower was seen without hearing from the leader
// while it still knew one (sampled every 250 ms), the margin left below
// HeartbeatTimeout.
func BenchmarkElectionsUnderCPUSaturation(b *testing.B) {
	duration := 60 * time.Second
	if v := os.Getenv("TRUSTPLANE_BENCH_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > time.Hour {
			b.Fatalf("TRUSTPLANE_BENCH_DURATION=%q: want a duration in (0, 1h]", v)
		}
		duration = d
	}
	hogs := 2
	if v := os.Getenv("TRUSTPLANE_BENCH_HOGS"); v != "" {
		h, err := strconv.Atoi(v)
		if err != nil || h < 0 || h > 16 {
			b.Fatalf("TRUSTPLANE_BENCH_HOGS=%q: want 0..16", v)
		}
		hogs = h
	}
	const writers = 16

	nodes := startCluster(b, 3)
	for _, n := range nodes {
		n.waitControllers(30 * time.Second)
	}
	before := raftStatuses(b, nodes)
	logFrom := make([]int, len(nodes))

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, n := range nodes {
			logFrom[j] = len(n.fullLog())
		}
		stopHogs := startHogs(b, hogs, duration+10*time.Second)

		var (
			lat      = make([][]time.Duration, writers)
			failures atomic.Int64
			wg       sync.WaitGroup
		)
		run := time.Now().UnixNano()
		start := time.Now()
		deadline := start.Add(duration)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				cs := nodes[w%len(nodes)].clientset()
				// Bounded by count as well as by the deadline.
				for j := 0; j < 1_000_000 && time.Now().Before(deadline); j++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					t0 := time.Now()
					_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sat-%d-%d-%d", run, w, j)},
						Data:       map[string]string{"k": "v"},
					}, metav1.CreateOptions{})
					cancel()
					if err != nil {
						failures.Add(1)
						continue
					}
					lat[w] = append(lat[w], time.Since(t0))
				}
			}(w)
		}

		// Sample the followers' last contact while the load runs.
		var maxContact time.Duration
		sample := adminClients(b, nodes)
		for k := 0; k < 100_000 && time.Now().Before(deadline); k++ {
			time.Sleep(250 * time.Millisecond)
			for j, n := range nodes {
				st, err := raftStatus(sample[j], n)
				if err != nil || st.State != "Follower" || st.Leader == "" || st.LastContact < 0 {
					continue
				}
				if d := time.Duration(st.LastContact); d > maxContact {
					maxContact = d
				}
			}
		}
		wg.Wait()
		elapsed := time.Since(start)
		stopHogs()

		after := raftStatuses(b, nodes)
		var candidacies, leaderChanges uint64
		var termBefore, termAfter uint64
		for j := range nodes {
			candidacies += after[j].Elections - before[j].Elections
			leaderChanges = max(leaderChanges, after[j].LeaderChanges-before[j].LeaderChanges)
			termBefore = max(termBefore, before[j].Term)
			termAfter = max(termAfter, after[j].Term)
		}
		var all []time.Duration
		for _, l := range lat {
			all = append(all, l...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		pct := func(p float64) float64 {
			if len(all) == 0 {
				return 0
			}
			return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000
		}
		b.ReportMetric(float64(termAfter-termBefore), "elections")
		b.ReportMetric(float64(candidacies), "candidacies")
		b.ReportMetric(float64(leaderChanges), "leader-changes")
		b.ReportMetric(float64(maxContact.Milliseconds()), "max-contact-ms")
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "writes/s")
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(float64(failures.Load()), "write-errors")
		b.Logf("%v with %d hogs and %d writers: term %d -> %d, %d candidacies, %d leader changes, %d writes, %d failed",
			elapsed.Round(time.Second), hogs, writers, termBefore, termAfter, candidacies, leaderChanges, len(all), failures.Load())
		for j, n := range nodes {
			for _, line := range electionLines(n.fullLog()[logFrom[j]:]) {
				b.Logf("%s: %s", n.name, line)
			}
		}
		before = after
	}
}

// startHogs starts n busy loops, each in its own process group and each
// ending itself after limit (timeout(1) kills it), so none outlives a
// crashed benchmark for long. The returned func kills them (their process
// groups, by the PIDs started here) and waits for them.
func startHogs(b *testing.B, n int, limit time.Duration) (stop func()) {
	b.Helper()
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		cmd := exec.Command("timeout", "--signal=KILL", strconv.Itoa(int(limit.Seconds())+1), "sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			b.Fatalf("starting a CPU hog: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, c := range cmds {
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
				_ = c.Wait()
			}
		})
	}
	b.Cleanup(stop)
	return stop
}

// adminClients is one admin HTTPS client per node.
func adminClients(t testing.TB, nodes []*node) []*http.Client {
	out := make([]*http.Client, len(nodes))
	for i, n := range nodes {
		out[i] = n.httpClient()
		out[i].Timeout = 5 * time.Second
	}
	return out
}

// raftStatus reads n's GET /debug/trustplane/raft.
func raftStatus(c *http.Client, n *node) (api.RaftStatus, error) {
	var st api.RaftStatus
	resp, err := c.Get(n.url() + "/debug/trustplane/raft")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: GET /debug/trustplane/raft: %s", n.name, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// raftStatuses reads every node's status, retrying each a bounded number
// of times (a saturated node may answer slowly).
func raftStatuses(b *testing.B, nodes []*node) []api.RaftStatus {
	b.Helper()
	cs := adminClients(b, nodes)
	out := make([]api.RaftStatus, len(nodes))
	for i, n := range nodes {
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if out[i], err = raftStatus(cs[i], n); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			b.Fatalf("raft status of %s: %v\n%s", n.name, err, n.logTail())
		}
	}
	return out
}

// electionLines are the lines of a node's log that show raft's leadership
// changing: why a follower started an election, and who won.
func electionLines(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for _, s := range []string{"heartbeat timeout reached", "entering candidate state", "entering leader state", "lost raft leadership", "failed to contact", "stepping down", "rejecting"} {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
		if len(out) >= 50 {
			break
		}
	}
	return out
}
