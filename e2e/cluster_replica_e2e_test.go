package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/fsm"
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
	if i := slices.Index(nodes[0].args, "--execute-writes"); i >= 0 {
		r.args = append(r.args, nodes[0].args[i:i+2]...)
	}
	r.start()
	t.Cleanup(r.kill)
	r.waitReady(90 * time.Second)
	return r
}

// TestClusterReplicaAndWebhooks runs three scenarios on one cluster of
// three voters and a read replica, every node with --execute-writes=local
// (the default, named so that the test keeps its mode) and an audit log,
// which share it to save a cluster's start:
//
//   - writes executed where they arrive (localWrites), and audited and
//     counted once, by the node that ran them (auditedWhereRun);
//   - admission webhooks through a follower: a follower's write is
//     admitted by the webhooks the follower calls, dry runs included; a
//     follower converts custom objects through their definition's
//     conversion webhook (runWebhookScenarios);
//   - the read replica: it joins as a Raft non-voter; the members
//     endpoint shows it as a replica and the voters as voters; writes
//     made through it are committed, reads on it are linearizable, it
//     answers TokenReviews; and when it is killed the voters keep their
//     quorum and commit.
func TestClusterReplicaAndWebhooks(t *testing.T) {
	nodes := startCluster(t, 3, "--execute-writes", "local", "--audit-log-path", "-", "--audit-policy-file", writeAuditPolicy(t))
	r := startReplica(t, "r1", nodes)
	t.Run("writes executed where they arrive", func(t *testing.T) { localWrites(t, nodes, r) })
	t.Run("audited where they run", func(t *testing.T) { auditedWhereRun(t, nodes) })
	t.Run("proposals over the internal RPC", func(t *testing.T) { proposalsOverRPC(t, nodes) })
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
	t.Run("the cluster version", func(t *testing.T) { clusterVersion(t, append(slices.Clone(nodes), r)) })
	t.Run("read replica", func(t *testing.T) { readReplica(t, nodes, r) })
}

// clusterVersion: every node, the replica included, reports the formats
// its build reads, so each finds, counting all four members, that the
// whole cluster reads version 2 of the internal RPC and writes it (its
// proposals in binary frames); trustplane members shows each node's
// release and the versions the cluster writes.
func clusterVersion(t *testing.T, all []*node) {
	for _, n := range all {
		waitFor(t, 30*time.Second, n.name+" to find the cluster's versions", func() bool {
			resp, err := n.httpClient().Get(n.url() + "/debug/trustplane/raft")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var st api.RaftStatus
			if json.NewDecoder(resp.Body).Decode(&st) != nil {
				return false
			}
			for _, f := range st.Formats {
				if f.Name == "internal-rpc" {
					return f.Version == 2 && len(f.Behind) == 0 && f.Members == len(all)
				}
			}
			return false
		})
		ms, err := n.members()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if r := m.Formats["internal-rpc"]; r.Min != 1 || r.Max != 2 {
				t.Fatalf("%s reports that %s reads internal-rpc %+v, want 1 to 2", n.name, m.Name, r)
			}
		}
	}
	out, err := exec.Command(binPath, "members", "--kubeconfig", all[len(all)-1].kubeconfigPath()).CombinedOutput()
	if err != nil {
		t.Fatalf("trustplane members: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "  internal-rpc 2\n") || strings.Count(string(out), "v"+trustplane.Release()) != len(all) {
		t.Fatalf("trustplane members shows no internal-rpc 2, or not every node's release %s:\n%s", trustplane.Release(), out)
	}
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
		// Every node runs the binary the harness built from this tree.
		if m.Version != trustplane.Version() {
			t.Errorf("%s reports version %q, want %q", m.Name, m.Version, trustplane.Version())
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
	// A replica takes part in every rotation of a root, as a voter does:
	// with it down, a node CA rotation cannot start, and nothing changes.
	out, err := nodes[0].rotate("node-ca", "start")
	if err == nil || !strings.Contains(out, "r1 (did not answer)") {
		t.Fatalf("node-ca start with the replica down: %v\n%s\nwant a refusal naming r1", err, out)
	}
	if out := nodes[0].mustRotate(t, "node-ca", "status"); strings.Contains(out, "pending") {
		t.Fatalf("a refused start left a pending CA:\n%s", out)
	}
}

// localWrites: with --execute-writes=local a follower and a replica run
// writes themselves and the leader only orders their commands. The
// answers are the leader's: the resourceVersion every node then serves,
// kube's 409s for a name taken and for a stale resourceVersion, and
// read-modify-write loops through three nodes at once that lose no
// increment (a write built on a state the leader has moved past meets its
// precondition and runs again). The node that ran a write serves it at
// the resourceVersion it answered. An object written through one node and
// changed at once through another is found there. The metrics show who did what:
// the follower's submitted writes, the leader's received ones.
func localWrites(t *testing.T, nodes []*node, r *node) {
	ctx := context.Background()
	leader := leaderOf(t, nodes)
	var f *node
	for _, n := range nodes {
		if n != leader {
			f = n
			break
		}
	}
	received := func() float64 {
		v, _ := value(metricFamilies(t, leader.httpClient(), leader), "trustplane_raft_proposals_received_total", nil)
		return v
	}
	before := received()

	created, err := createSA(f.clientset(), "local-write")
	if err != nil {
		t.Fatalf("a create through a follower: %v", err)
	}
	if got, err := getSA(f.clientset(), "local-write", created.ResourceVersion); err != nil || got.ResourceVersion != created.ResourceVersion {
		t.Fatalf("the follower does not serve its own write at its resourceVersion: %v %v", got, err)
	}
	for _, n := range append(slices.Clone(nodes), r) {
		if got, err := getSA(n.clientset(), "local-write", ""); err != nil || got.ResourceVersion != created.ResourceVersion || got.UID != created.UID {
			t.Fatalf("%s reads %v %v, want the follower's write at %s", n.name, got, err, created.ResourceVersion)
		}
	}
	_, err = createSA(r.clientset(), "local-write")
	wantAPIError(t, err, 409, metav1.StatusReasonAlreadyExists, `serviceaccounts "local-write" already exists`)
	stale := created.DeepCopy()
	stale.Labels = map[string]string{"a": "b"}
	if _, err := leader.clientset().CoreV1().ServiceAccounts("default").Update(ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Labels = map[string]string{"a": "stale"}
	_, err = r.clientset().CoreV1().ServiceAccounts("default").Update(ctx, stale, metav1.UpdateOptions{})
	wantAPIError(t, err, 409, metav1.StatusReasonConflict, `Operation cannot be fulfilled on serviceaccounts "local-write": the object has been modified; please apply your changes to the latest version and try again`)

	// Written through one node and at once changed through another, which
	// may not have applied the write yet: the answers are the leader's,
	// never a 404 or a 409 made from a state behind it.
	for i := range 10 {
		name := fmt.Sprintf("hop-%d", i)
		cm, err := leader.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"hop": "replica"}
		cm, err = r.clientset().CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("an update through the replica of %s, just created through the leader: %v", name, err)
		}
		rv := cm.ResourceVersion
		if err := f.clientset().CoreV1().ConfigMaps("default").Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
			t.Fatalf("a delete through a follower of %s at the replica's resourceVersion %s: %v", name, rv, err)
		}
	}

	// Increments through three nodes at once.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "local-counter"}, Data: map[string]string{"n": "0"}}
	if _, err := f.clientset().CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const each = 8
	var wg sync.WaitGroup
	errs := make(chan error, 3*each)
	for _, n := range []*node{leader, f, r} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cms := n.clientset().CoreV1().ConfigMaps("default")
			for range each {
				// Three writers on one object: more attempts than
				// client-go's default five, which three racing writers
				// can use up.
				errs <- retry.RetryOnConflict(wait.Backoff{Steps: 100, Duration: 5 * time.Millisecond, Factor: 1.1, Jitter: 1, Cap: 100 * time.Millisecond}, func() error {
					cur, err := cms.Get(ctx, "local-counter", metav1.GetOptions{})
					if err != nil {
						return err
					}
					v, _ := strconv.Atoi(cur.Data["n"])
					cur.Data["n"] = strconv.Itoa(v + 1)
					_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
					return err
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("an increment: %v", err)
		}
	}
	// A merge patch carries no resourceVersion: the node's own update
	// loop retries it on a conflict.
	for _, n := range []*node{f, r} {
		if _, err := n.clientset().CoreV1().ConfigMaps("default").Patch(ctx, "local-counter", types.MergePatchType, []byte(`{"data":{"patched-`+n.name+`":"yes"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("a patch through %s: %v", n.name, err)
		}
	}
	got, err := leader.clientset().CoreV1().ConfigMaps("default").Get(ctx, "local-counter", metav1.GetOptions{})
	if err != nil || got.Data["n"] != strconv.Itoa(3*each) || got.Data["patched-"+f.name] != "yes" || got.Data["patched-"+r.name] != "yes" {
		t.Fatalf("after %d increments and two patches through three nodes: %v %v", 3*each, got.Data, err)
	}
	if err := r.clientset().CoreV1().ConfigMaps("default").Delete(ctx, "local-counter", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.clientset().CoreV1().ConfigMaps("default").Get(ctx, "local-counter", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a delete through the replica: %v", err)
	}

	if after := received(); after-before < 2*each {
		t.Fatalf("the leader received %v proposals from other nodes, want at least %d", after-before, 2*each)
	}
	if v, _ := value(metricFamilies(t, f.httpClient(), f), "trustplane_raft_submitted_total", map[string]string{"outcome": "applied"}); v < each {
		t.Fatalf("the follower submitted %v writes, want at least %d", v, each)
	}
}

// proposalsOverRPC: the internal RPC's propose operation, which a node
// executing writes locally uses, as a holder of a node certificate
// (a stolen replica identity) would use it: the leader proposes no
// internal record (the token signing keys), no compaction and no
// garbage, and answers each with a refusal; nothing changes (the JWKS,
// the signing keys' stored record). Without a node certificate the
// connection never gets a frame in (TestNodeIdentityCannotBeMinted).
func proposalsOverRPC(t *testing.T, nodes []*node) {
	leader := leaderOf(t, nodes)
	nodeCA, err := certs.LoadNodeCA(leader.caDir)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := nodeCA.Issue(certs.NodeRequest("stolen-replica", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	jwks := func() string {
		r := do(t, leader.httpClient(), http.MethodGet, leader.url()+"/openid/v1/jwks", nil, nil)
		return string(r.body)
	}
	before := jwks()
	internal := fsm.Key{Space: fsm.SpaceInternal, Resource: authn.SigningKeysResource, Name: "attacker"}
	for _, c := range []struct {
		name    string
		command []byte
		code    string
	}{
		{"an internal record", (&fsm.Command{Op: fsm.OpPut, Key: internal, Value: []byte(`{"pwned":true}`)}).Encode(), "not_permitted"},
		{"deleting the signing keys", (&fsm.Command{Op: fsm.OpDelete, Key: fsm.Key{Space: fsm.SpaceInternal, Resource: authn.SigningKeysResource, Name: "current"}}).Encode(), "not_permitted"},
		{"a compaction", (&fsm.Command{Op: fsm.OpCompact, CompactRevision: 1 << 40}).Encode(), "not_permitted"},
		{"garbage", []byte{0x01, 0xff, 0xff}, "bad_request"},
	} {
		resp, err := rpcRoundTrip(leader.raftAddr, cert, nodeCA.Pool(), map[string]any{"op": "propose", "commands": [][]byte{c.command}})
		ps, _ := resp["proposals"].([]any)
		if err != nil || len(ps) != 1 || ps[0].(map[string]any)["code"] != c.code {
			t.Fatalf("%s: the leader answered %v %v, want %s", c.name, resp, err, c.code)
		}
	}
	// The same with binary frames (internal RPC version 2): an internal
	// record is refused in the binary answer, and a frame counting 33
	// million empty commands (32 MiB: the red team's, which once made the
	// leader allocate 768 MiB) is refused as a frame.
	binaryFrame := func(cmds ...[]byte) []byte {
		b := binary.AppendUvarint(binary.AppendUvarint([]byte{2}, 1000), uint64(len(cmds)))
		for _, c := range cmds {
			b = append(binary.AppendUvarint(b, uint64(len(c))), c...)
		}
		return b
	}
	answer, err := rpcRoundTripRaw(leader.raftAddr, cert, nodeCA.Pool(), binaryFrame((&fsm.Command{Op: fsm.OpPut, Key: internal, Value: []byte(`{"pwned":true}`)}).Encode()))
	// byte 2, one result: index 0, result "", code "not_permitted", err ...
	if err != nil || len(answer) < 4 || answer[0] != 2 || answer[1] != 1 || !strings.HasPrefix(string(answer[3:]), "\x00\x0dnot_permitted") {
		t.Fatalf("a binary proposal of an internal record: %q %v, want not_permitted", answer, err)
	}
	const empties = 32<<20 - 8
	huge := append(binary.AppendUvarint([]byte{2, 0xe8, 0x07}, empties), make([]byte, empties)...)
	answer, err = rpcRoundTripRaw(leader.raftAddr, cert, nodeCA.Pool(), huge)
	if err != nil || !strings.Contains(string(answer), `"code":"bad_request"`) || !strings.Contains(string(answer), "at most 128") {
		t.Fatalf("a frame of %d empty commands: %.300q %v, want bad_request", empties, answer, err)
	}
	if after := jwks(); after != before {
		t.Fatalf("the JWKS changed:\n%s\n%s", before, after)
	}
	if strings.Contains(leader.fullLog(), "pwned") {
		t.Fatal("a refused proposal's bytes reached the log")
	}

	// A forwarded write in a forwarded-request version the leader does
	// not read, from a node certificate with identity headers claiming
	// system:masters: refused before the headers are believed, both
	// versions named, nothing written.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: leader.caPool(), Certificates: []tls.Certificate{cert}},
	}}
	spoof := map[string]string{"X-Trustplane-Forwarded-By": "2", "X-Remote-User": "admin", "X-Remote-Group": "system:masters", "Content-Type": "application/json"}
	r := do(t, c, http.MethodPost, leader.url()+"/api/v1/namespaces", spoof, []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"forwarded-v2"}}`))
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "format version 2, and this node reads up to version 1") {
		t.Fatalf("a forwarded write of version 2: %d %s, want 503 naming both versions", r.code, r.body)
	}
	if _, err := leader.clientset().CoreV1().Namespaces().Get(context.Background(), "forwarded-v2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace forwarded-v2: %v, want NotFound", err)
	}
}

// rpcRoundTripRaw sends one internal-RPC frame of payload to a Raft port
// with cert and returns the answer's payload.
func rpcRoundTripRaw(addr string, cert tls.Certificate, pool *x509.CertPool, payload []byte) ([]byte, error) {
	host, _, _ := net.SplitHostPort(addr)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32([]byte{raftRPCMarker}, uint32(len(payload))), payload...)); err != nil {
		return nil, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	out := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err = io.ReadFull(c, out)
	return out, err
}

// rpcRoundTrip sends one internal-RPC request to a Raft port with cert
// and returns the decoded response.
func rpcRoundTrip(addr string, cert tls.Certificate, pool *x509.CertPool, req any) (map[string]any, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out, err := rpcRoundTripRaw(addr, cert, pool, body)
	if err != nil {
		return nil, err
	}
	var resp map[string]any
	return resp, json.Unmarshal(out, &resp)
}

// auditedWhereRun: a write a follower runs itself is recorded once, by
// that follower, with the client's identity, the object sent and the one
// created, and the 201: what TestE2EAuditCluster checks of a forwarded
// write. No other node records it; the leader only ordered its command.
// Its request metrics are the same as a forwarded write's
// (TestE2EMetricsCluster): apiserver_request_total counts it once, on the
// follower the client used, and on no other node.
func auditedWhereRun(t *testing.T, nodes []*node) {
	leader := leaderOf(t, nodes)
	follower := followersOf(nodes, leader)[0]
	posted := map[string]string{"verb": "POST", "resource": "configmaps", "code": "201"}
	counted := func() []float64 {
		var out []float64
		for _, n := range nodes {
			v, _ := value(metricFamilies(t, n.httpClient(), n), "apiserver_request_total", posted)
			out = append(out, v)
		}
		return out
	}
	before := counted()
	const writer = "audit-local-writer"
	cs := follower.userClientset(t, writer, "system:masters")
	if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "audited-here"}, Data: map[string]string{"k": "local-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	auditedOnceBy(t, nodes, follower, writer, "audited-here", "local-value")
	for i, after := range counted() {
		if want := float64(boolInt(nodes[i] == follower)); after-before[i] != want {
			t.Errorf("%s: apiserver_request_total%v rose by %v, want %v (recorded by the follower the client used only)", nodes[i].name, posted, after-before[i], want)
		}
	}
}
