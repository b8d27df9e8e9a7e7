package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStaleFollowerStopsServingLocalReads: a follower cut off from the
// rest (both other nodes frozen with SIGSTOP) serves resourceVersion=0
// reads from its own state only until --max-stale-read has passed without
// a leader. After that such a read is answered as a linearizable one,
// which fails without a leader, and a watch is refused with 503; once the
// others resume it serves again.
func TestStaleFollowerStopsServingLocalReads(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	nodes := startCluster(t, 3, "--controllers=false", "--max-stale-read", "1s")
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	if _, err := createSA(leader.clientset(), "stale-probe"); err != nil {
		t.Fatal(err)
	}
	c := f.httpClient()
	c.Timeout = 40 * time.Second
	path := f.url() + "/api/v1/namespaces/default/serviceaccounts"
	waitFor(t, 10*time.Second, f.name+" to serve a resourceVersion=0 list", func() bool {
		return do(t, c, http.MethodGet, path+"?resourceVersion=0", nil, nil).code == http.StatusOK
	})

	others := []*node{leader, followersOf(nodes, leader)[1]}
	for _, o := range others {
		o.pause()
	}
	resumed := false
	resume := func() {
		if !resumed {
			for _, o := range others {
				o.resume()
			}
			resumed = true
		}
	}
	defer resume()
	time.Sleep(2 * time.Second) // past --max-stale-read, with no leader to hear from

	if r := do(t, c, http.MethodGet, path+"?resourceVersion=0", nil, nil); r.code < 500 {
		t.Fatalf("a follower cut off for longer than --max-stale-read answered a resourceVersion=0 list with %d: %s", r.code, r.body)
	}
	if r := do(t, c, http.MethodGet, path+"?watch=true&resourceVersion=0", nil, nil); r.code != http.StatusServiceUnavailable {
		t.Fatalf("a stale follower answered a watch with %d: %s", r.code, r.body)
	}

	resume()
	waitFor(t, 30*time.Second, f.name+" to serve resourceVersion=0 again once it hears from a leader", func() bool {
		return do(t, c, http.MethodGet, path+"?resourceVersion=0", nil, nil).code == http.StatusOK
	})
}

// TestRestartedFollowerServesNoStateOlderThanTheBound is the regression
// test of a trustplane chaos finding: a restarted follower hears from the
// leader at once, but until it has replayed its log it holds the state of
// its last snapshot (here: nothing). Contact alone used to make it serve
// resourceVersion=0 lists from that state. Every such list it answers
// must now hold a write acknowledged more than --max-stale-read before.
func TestRestartedFollowerServesNoStateOlderThanTheBound(t *testing.T) {
	const bound = 2 * time.Second
	nodes := startCluster(t, 3, "--controllers=false", "--max-stale-read", bound.String())
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	f.kill()

	// A log for the follower to replay when it comes back.
	cs := leader.clientset()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				cs.CoreV1().ConfigMaps("default").Create(context.Background(),
					&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%d-%d", w, i)}}, metav1.CreateOptions{})
			}
		}(w)
	}
	wg.Wait()
	if _, err := createSA(cs, "marker"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(bound + time.Second) // the marker is now older than the bound

	f.start()
	c := f.httpClient() // its kubeconfig is still there from the first start
	c.Timeout = 5 * time.Second
	path := f.url() + "/api/v1/namespaces/default/serviceaccounts?resourceVersion=0"
	served := 0
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && served < 50 {
		resp, err := c.Get(path)
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		served++
		if !strings.Contains(string(body), `"marker"`) {
			t.Fatalf("the restarted follower answered a resourceVersion=0 list without a write acknowledged %v before it was restarted (more than --max-stale-read %v):\n%s", bound+time.Second, bound, body)
		}
	}
	if served == 0 {
		t.Fatalf("the restarted follower served no resourceVersion=0 list in 20s:\n%s", f.logTail())
	}
}
