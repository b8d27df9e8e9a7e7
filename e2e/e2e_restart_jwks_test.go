package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestE2ERestartedNodeJWKS: a node restarted from a snapshot older than a
// signing key's start and promote never publishes a key set without the
// key the cluster signs with (chaos seed 1796249472266586013). While it is
// cut off from the other nodes it answers the JWKS 503 with Retry-After
// instead of its snapshot's keys; once they are back it publishes the new
// key and verifies a token signed with it at once.
func TestE2ERestartedNodeJWKS(t *testing.T) {
	// A snapshot every 200 entries, looked for twice a second.
	nodes := startCluster(t, 3, "--raft-snapshot-threshold", "200", "--raft-snapshot-interval", "500ms")
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	ctx := context.Background()
	cs := leader.clientset()

	// Write until f takes a snapshot close behind the newest write: the
	// next one is then at least 50 entries away, more than the rotation
	// below writes.
	snapped := false
	for i := 0; i < 2000 && !snapped; i++ {
		cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bulk-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		s := f.lastSnapshotIndex(t)
		snapped = i >= 200 && s > 0 && s+150 >= last
	}
	if !snapped {
		t.Fatalf("%s took no snapshot close behind 2000 writes", f.name)
	}
	marker, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-rotation"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	beforeRotation, _ := strconv.ParseUint(marker.ResourceVersion, 10, 64)

	leader.mustRotate(t, "signing-key", "start")
	waitFor(t, 30*time.Second, "every voter applied the new key", func() bool {
		_, err := leader.rotate("signing-key", "promote")
		return err == nil
	})
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kid := jwtKid(t, tr.Status.Token)
	if !strings.Contains(string(do(t, f.httpClient(), http.MethodGet, f.url()+"/openid/v1/jwks", nil, nil).body), kid) {
		t.Fatalf("%s does not publish the promoted key %s before its restart", f.name, kid)
	}

	for _, n := range nodes {
		n.kill()
	}
	if s := f.lastSnapshotIndex(t); s > beforeRotation {
		t.Fatalf("precondition: %s's snapshot (index %d) is not older than the rotation (after index %d)", f.name, s, beforeRotation)
	}
	f.start()
	// Alone, f holds its snapshot's keys and a log it cannot know is
	// committed: it must not publish the snapshot's keys. (Each refusal
	// takes a while: the node first looks for a leader to catch up with.)
	var alone httpResult
	waitFor(t, 60*time.Second, f.name+" answers alone", func() bool {
		var ok bool
		alone, ok = f.tryJWKS()
		return ok
	})
	if alone.code != http.StatusServiceUnavailable || alone.header.Get("Retry-After") != "1" || !strings.Contains(string(alone.body), "has not caught up with the cluster's leader") {
		t.Fatalf("%s alone, from a snapshot older than the rotation, answered the JWKS %d (Retry-After %q): %s", f.name, alone.code, alone.header.Get("Retry-After"), alone.body)
	}
	for _, n := range nodes {
		if n != f {
			n.start()
		}
	}
	// The first answer that is not a refusal already has the new key, and
	// the token signed with it verifies there.
	waitFor(t, 90*time.Second, f.name+" publishes the JWKS again", func() bool {
		r := do(t, f.httpClient(), http.MethodGet, f.url()+"/openid/v1/jwks", nil, nil)
		if r.code == http.StatusOK && !strings.Contains(string(r.body), kid) {
			t.Fatalf("%s published a key set without the promoted key %s: %s", f.name, kid, r.body)
		}
		return r.code == http.StatusOK
	})
	st := review(t, f.clientset(), tr.Status.Token)
	if !st.Authenticated {
		t.Fatalf("%s refused a token of the promoted key: %+v", f.name, st)
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}
}

// tryJWKS fetches n's JWKS; false when n did not answer (not listening
// yet), where do would fail the test.
func (n *node) tryJWKS() (httpResult, bool) {
	resp, err := n.httpClient().Get(n.url() + "/openid/v1/jwks")
	if err != nil {
		return httpResult{}, false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return httpResult{code: resp.StatusCode, header: resp.Header, body: body}, true
}

// lastSnapshotIndex is the index of n's newest raft snapshot on disk (0
// for none): raft's file store names each <term>-<index>-<time>.
func (n *node) lastSnapshotIndex(t testing.TB) uint64 {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.dir, "raft", "snapshots"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var newest uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if i, err := strconv.ParseUint(parts[1], 10, 64); err == nil && i > newest {
			newest = i
		}
	}
	return newest
}
