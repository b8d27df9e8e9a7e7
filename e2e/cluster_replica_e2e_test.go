package e2e_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/api"
)

// startReplica starts a read replica (--role replica) that joins the
// cluster of nodes through their gossip addresses, and waits until it is
// ready. It is stopped when the test ends.
func startReplica(t testing.TB, name string, nodes []*node) *node {
	t.Helper()
	var gossip []string
	for _, n := range nodes {
		if i := slices.Index(n.args, "--gossip-addr"); i >= 0 {
			gossip = append(gossip, n.args[i+1])
		}
	}
	r := &node{
		t: t, name: name, dir: t.TempDir(), caDir: nodes[0].caDir,
		listen: freePort(t), raftAddr: freePort(t),
		args: []string{"--ca-dir", nodes[0].caDir, "--gossip-addr", freePort(t), "--join", strings.Join(gossip, ","), "--role", "replica"},
	}
	r.start()
	t.Cleanup(r.kill)
	r.waitReady(90 * time.Second)
	return r
}

// TestClusterReplicaAndWebhooks runs two scenarios on one cluster of
// three voters and a read replica, which share it to save a cluster's
// start:
//
//   - admission webhooks through a follower: a write a follower forwards
//     is admitted by the webhooks on the leader, which admits it, dry
//     runs included; a follower converts custom objects through their
//     definition's conversion webhook (runWebhookScenarios);
//   - the read replica: it joins as a Raft non-voter; the members
//     endpoint shows it as a replica and the voters as voters; writes
//     made through it are committed (forwarded, for now, to the leader),
//     reads on it are linearizable, it answers TokenReviews; and when it
//     is killed the voters keep their quorum and commit.
func TestClusterReplicaAndWebhooks(t *testing.T) {
	nodes := startCluster(t, 3)
	r := startReplica(t, "r1", nodes)
	t.Run("webhooks through a follower", func(t *testing.T) {
		leader := leaderOf(t, nodes)
		var follower *node
		for _, n := range nodes {
			if n != leader {
				follower = n
				break
			}
		}
		runWebhookScenarios(t, follower, leader, "e2e-webhooks-cluster", false)
	})
	t.Run("read replica", func(t *testing.T) { readReplica(t, nodes, r) })
}

func readReplica(t *testing.T, nodes []*node, r *node) {
	var ms []api.Member
	waitFor(t, 30*time.Second, "the replica among the members", func() bool {
		var err error
		ms, err = nodes[0].members()
		if err != nil {
			return false
		}
		for _, m := range ms {
			if m.Name == "r1" {
				return m.Replica && !m.Voter && m.AppliedIndex > 0
			}
		}
		return false
	})
	voters := 0
	for _, m := range ms {
		if m.Voter {
			voters++
		}
		if m.Name == "r1" && m.RaftState == "Leader" {
			t.Fatal("the replica leads")
		}
	}
	if voters != 3 {
		t.Fatalf("voters %d, want 3: %+v", voters, ms)
	}

	var st api.RaftStatus
	resp, err := r.httpClient().Get(r.url() + "/debug/trustplane/raft")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Role != "replica" || st.State != "Follower" {
		t.Fatalf("the replica's raft status: %+v %v", st, err)
	}
	metrics, err := r.clientset().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil || !strings.Contains(string(metrics), "\ntrustplane_raft_replica 1\n") || !strings.Contains(string(metrics), "\ntrustplane_raft_replication_lag_entries ") {
		t.Fatalf("the replica's metrics lack its role or lag: %v", err)
	}
	created, err := createSA(r.clientset(), "through-replica")
	if err != nil {
		t.Fatalf("a write through the replica: %v", err)
	}
	for _, n := range append(nodes, r) {
		got, err := getSA(n.clientset(), "through-replica", "")
		if err != nil || got.ResourceVersion != created.ResourceVersion {
			t.Fatalf("linearizable read on %s: %v %v", n.name, got, err)
		}
	}
	ctx := context.Background()
	tr, err := nodes[0].clientset().CoreV1().ServiceAccounts("default").CreateToken(ctx, "through-replica", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := r.clientset().AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	if err != nil || !rev.Status.Authenticated || rev.Status.User.Username != "system:serviceaccount:default:through-replica" {
		t.Fatalf("TokenReview on the replica: %+v %v", rev, err)
	}
	if out, err := r.kubectl("get", "serviceaccount", "through-replica", "-o", "name"); err != nil || !strings.Contains(out, "through-replica") {
		t.Fatalf("kubectl through the replica: %v\n%s", err, out)
	}

	r.kill()
	if _, err := createSA(nodes[1].clientset(), "after-the-replica"); err != nil {
		t.Fatalf("the voters stopped committing without the replica: %v", err)
	}
}
