//go:build failpoints

package e2e_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/internal/failpoint"
)

// These run only in a failpoints build (go test -tags failpoints
// ./cmd/trustplane -run Failpoint), whose TestMain builds the binary with
// the tag too.

// setFailpoints replaces the node's failpoint file the way the chaos tool
// does (write, then rename).
func (n *node) setFailpoints(t *testing.T, st failpoint.State) {
	t.Helper()
	tmp := filepath.Join(n.dir, failpoint.FileName+".tmp")
	if err := os.WriteFile(tmp, st.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.dir, failpoint.FileName)); err != nil {
		t.Fatal(err)
	}
}

func TestE2EFailpointVersion(t *testing.T) {
	out, err := exec.Command(binPath, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("trustplane version: %v\n%s", err, out)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), " +failpoints") {
		t.Fatalf("trustplane version of a failpoints build: %q, want it to end in \" +failpoints\"", out)
	}
}

// TestE2EFailpointDiskFull: a one-node cluster whose disk is "full" fails
// /readyz and acknowledges no write (raft cannot append to bolt); once
// the disk has room it is ready again, takes writes, and has every write
// it acknowledged and none it refused.
func TestE2EFailpointDiskFull(t *testing.T) {
	n := startNode(t, "--controllers=false")
	cs := n.clientset()
	cms := cs.CoreV1().ConfigMaps("default")
	create := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}, metav1.CreateOptions{})
		return err
	}
	if err := create("before"); err != nil {
		t.Fatal(err)
	}

	n.setFailpoints(t, failpoint.State{DiskFull: true})
	readyz := func() int { return do(t, n.anonClient(), http.MethodGet, n.url()+"/readyz", nil, nil).code }
	waitFor(t, 20*time.Second, "/readyz to fail on a full disk", func() bool { return readyz() != http.StatusOK })
	if r := do(t, n.anonClient(), http.MethodGet, n.url()+"/readyz?verbose", nil, nil); !strings.Contains(string(r.body), "storage") {
		t.Logf("/readyz?verbose on a full disk: %d %s", r.code, r.body)
	}
	// Raw HTTP, so client-go's retries do not hide the answer.
	admin := n.httpClient()
	for _, name := range []string{"refused-1", "refused-2"} {
		body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"}}`)
		r := do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces/default/configmaps", jsonHeader("application/json"), body)
		if r.code < 300 {
			t.Fatalf("a node with a full disk acknowledged %s: %d %s", name, r.code, r.body)
		}
		t.Logf("create on a full disk: HTTP %d %s", r.code, r.body)
	}
	if !strings.Contains(n.fullLog(), "no space left on device") {
		t.Errorf("the node's log does not mention the full disk:\n%s", n.logTail())
	}

	n.setFailpoints(t, failpoint.State{})
	waitFor(t, 30*time.Second, "/readyz once the disk has room", func() bool { return readyz() == http.StatusOK })
	var err error
	waitFor(t, 30*time.Second, "a write once the disk has room", func() bool { err = create("after"); return err == nil })
	for _, name := range []string{"before", "after"} {
		if _, err := cms.Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("acknowledged %s: %v", name, err)
		}
	}
	for _, name := range []string{"refused-1", "refused-2"} {
		if _, err := cms.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("refused %s: %v, want NotFound", name, err)
		}
	}
}

// TestE2EFailpointFsyncDelay: with a slow disk a write takes at least the
// delay (a lower bound only) and still succeeds.
func TestE2EFailpointFsyncDelay(t *testing.T) {
	n := startNode(t, "--controllers=false")
	cms := n.clientset().CoreV1().ConfigMaps("default")
	const delay = 300 * time.Millisecond
	n.setFailpoints(t, failpoint.State{FsyncDelay: delay})
	// The node reads the file when it next looks at its storage; /readyz
	// makes it look.
	waitFor(t, 20*time.Second, "the node to log the new failpoints", func() bool {
		do(t, n.anonClient(), http.MethodGet, n.url()+"/readyz", nil, nil)
		return strings.Contains(n.fullLog(), "fsync-delay="+delay.String()+" disk-full=false")
	})
	start := time.Now()
	_, err := cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slow"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("a write on a slow disk took %s, want at least %s", took, delay)
	}
}

// TestE2EFailpointFullDiskFollowerStopsServingLocalReads is the regression
// test of a trustplane chaos finding: a follower that cannot write its log
// still hears the leader's heartbeats, and raft caps its commit index at
// its own last entry, so it counted its frozen state as current and served
// resourceVersion=0 lists older than --max-stale-read. Every such list it
// answers must hold a write acknowledged more than the bound before, and
// its /readyz fails.
func TestE2EFailpointFullDiskFollowerStopsServingLocalReads(t *testing.T) {
	const bound = 2 * time.Second
	nodes := startCluster(t, 3, "--controllers=false", "--max-stale-read", bound.String())
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	f.setFailpoints(t, failpoint.State{DiskFull: true})
	defer f.setFailpoints(t, failpoint.State{})
	time.Sleep(500 * time.Millisecond) // the follower reads its failpoints every 100 ms

	if _, err := createSA(leader.clientset(), "marker"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(bound + time.Second) // the marker is now older than the bound

	// Such a read is now linearizable: it waits for an entry the follower
	// cannot append, so it ends in an error or the client's timeout. Only
	// an answer from the frozen state is wrong.
	c := f.httpClient()
	c.Timeout = 2 * time.Second
	path := f.url() + "/api/v1/namespaces/default/serviceaccounts?resourceVersion=0"
	for i := 0; i < 5; i++ {
		resp, err := c.Get(path)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && !strings.Contains(string(body), `"marker"`) {
			t.Fatalf("a follower that cannot write its log answered a resourceVersion=0 list without a write acknowledged %v before (over --max-stale-read %v):\n%s", bound+time.Second, bound, body)
		}
	}
	// Its /readyz fails fsm-caught-up, not only storage: raft's commit
	// index there is capped at its own last entry, so only the staleness
	// rule tells that it is behind (the rule that also keeps a restarted
	// node unready while it replays its log).
	r := do(t, f.httpClient(), http.MethodGet, f.url()+"/readyz?verbose", nil, nil)
	if r.code == http.StatusOK || !strings.Contains(string(r.body), "[-]fsm-caught-up failed") {
		t.Fatalf("a follower that cannot write its log passes fsm-caught-up (%d):\n%s", r.code, r.body)
	}
}

// TestE2EFailpointTokenReviewOnALaggingFollower is the regression test of
// a trustplane bench finding: a token minted on the leader for a
// ServiceAccount created a moment before was rejected by a follower that
// had not applied the ServiceAccount yet ("serviceaccounts ... not
// found"). Like kube's token getter, a local miss now falls back to a
// linearizable read. The follower's slow disk makes it lag for certain.
func TestE2EFailpointTokenReviewOnALaggingFollower(t *testing.T) {
	nodes := startCluster(t, 3, "--controllers=false")
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	f.setFailpoints(t, failpoint.State{FsyncDelay: 1500 * time.Millisecond})
	defer f.setFailpoints(t, failpoint.State{})
	time.Sleep(500 * time.Millisecond) // the follower reads its failpoints every 100 ms

	if _, err := createSA(leader.clientset(), "fresh"); err != nil {
		t.Fatal(err)
	}
	tr := requestToken(t, leader.clientset(), "default", "fresh", authenticationv1.TokenRequestSpec{})
	st := review(t, f.clientset(), tr.Status.Token)
	if !st.Authenticated || st.User.Username != "system:serviceaccount:default:fresh" {
		t.Fatalf("a lagging follower rejected a token minted on the leader: authenticated %v, user %q, error %q", st.Authenticated, st.User.Username, st.Error)
	}
}
