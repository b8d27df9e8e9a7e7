package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/api"
)

// ackedWrites creates count ServiceAccounts named prefix-i, each through
// the first of nodes that acknowledges it, and returns the names that were
// acknowledged. Each write gets a bounded number of attempts before the
// deadline; an AlreadyExists on a retry means an earlier attempt committed,
// so it counts as acknowledged too.
func ackedWrites(t *testing.T, nodes []*node, prefix string, count int, deadline time.Time) []string {
	t.Helper()
	var acked []string
	for i := range count {
		name := fmt.Sprintf("%s-%d", prefix, i)
		for attempt := 0; attempt < 20 && time.Now().Before(deadline); attempt++ {
			n := nodes[attempt%len(nodes)]
			_, err := createSA(n.clientset(), name)
			if err == nil || attempt > 0 && apierrors.IsAlreadyExists(err) {
				acked = append(acked, name)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return acked
}

// TestKillThenTerminateKeepsQuorum: in a three-node cluster one node is
// killed, then another gets SIGTERM and is restarted. With
// --leave-on-terminate the SIGTERM'd node does not leave (removing it
// would leave one alive voter of two), and without it it never tries: in
// both cases it comes back as the same voter, writes resume, and every
// write acknowledged before and between the faults is still there.
func TestKillThenTerminateKeepsQuorum(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// at once sends the SIGTERM right after the kill, with no writes
		// between: the leader's raft and gossip have not noticed the
		// dead node yet, so only asking it directly keeps the leave from
		// counting it (cluster.voterHealth).
		atOnce bool
	}{
		{"leave-on-terminate", []string{"--leave-on-terminate"}, false},
		{"leave-on-terminate at once", []string{"--leave-on-terminate"}, true},
		{"default", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := startCluster(t, 3, tc.args...)
			var acked []string
			acked = append(acked, ackedWrites(t, nodes, "before", 10, time.Now().Add(60*time.Second))...)
			if len(acked) != 10 {
				t.Fatalf("healthy cluster acknowledged %d of 10 writes", len(acked))
			}

			leader := leaderOf(t, nodes)
			dead := followersOf(nodes, leader)[0]
			dead.kill()
			live := followersOf(nodes, dead)
			if !tc.atOnce {
				acked = append(acked, ackedWrites(t, live, "between", 10, time.Now().Add(60*time.Second))...)
				if len(acked) != 20 {
					t.Fatalf("two of three nodes acknowledged %d of 10 writes", len(acked)-10)
				}
			}

			// SIGTERM the leader of the two that are left.
			term := leaderOf(t, live)
			term.stop()
			if tc.args != nil {
				if !strings.Contains(term.fullLog(), "stays a voter") {
					t.Errorf("the SIGTERM'd node did not log that it stays a voter:\n%s", term.logTail())
				}
			}
			term.start()
			term.waitReady(90 * time.Second)
			before := len(acked)
			acked = append(acked, ackedWrites(t, live, "after", 10, time.Now().Add(60*time.Second))...)
			if len(acked) != before+10 {
				t.Fatalf("writes did not resume after the restart: %d of 10 acknowledged", len(acked)-before)
			}

			ms, err := term.members()
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes {
				if m, ok := member(ms, n.name); !ok || !m.Voter {
					t.Errorf("%s is no longer a voter: %+v", n.name, ms)
				}
			}
			for _, n := range live {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				list, err := n.clientset().CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{})
				cancel()
				if err != nil {
					t.Fatalf("list on %s: %v", n.name, err)
				}
				have := map[string]bool{}
				for _, sa := range list.Items {
					have[sa.Name] = true
				}
				for _, name := range acked {
					if !have[name] {
						t.Errorf("acknowledged write %s is missing on %s", name, n.name)
					}
				}
			}
		})
	}
}

// TestRemovedNodeStaysOut: "trustplane members remove" is durable. The
// removed node, restarted with its data dir, is not re-added, and it
// refuses resourceVersion=0 reads and watches with a retryable 503.
func TestRemovedNodeStaysOut(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	gone := followersOf(nodes, leader)[0]
	gone.kill()
	if out, err := exec.Command(binPath, "members", "--kubeconfig", leader.kubeconfigPath(), "remove", gone.name).CombinedOutput(); err != nil {
		t.Fatalf("trustplane members remove %s: %v\n%s", gone.name, err, out)
	}
	waitMembers(t, leader, gone.name+" removed", func(ms []api.Member) bool {
		m, ok := member(ms, gone.name)
		return !ok || !m.Voter
	})
	gone.start()
	c := gone.httpClient()
	for _, path := range []string{
		"/api/v1/namespaces/default/serviceaccounts?resourceVersion=0",
		"/api/v1/namespaces/default/serviceaccounts?watch=true&timeoutSeconds=1",
	} {
		waitFor(t, 60*time.Second, "a 503 for "+path+" from the removed node", func() bool {
			resp, err := c.Get(gone.url() + path)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
		})
	}
	// Give the leader several reconcile rounds: the node stays out.
	time.Sleep(6 * time.Second)
	ms, err := leader.members()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := member(ms, gone.name); ok && m.Voter {
		t.Fatalf("the removed node was re-added: %+v", ms)
	}
	if _, err := createSA(leader.clientset(), "after-removed-restart"); err != nil {
		t.Fatalf("write with the removed node back up: %v", err)
	}
}
