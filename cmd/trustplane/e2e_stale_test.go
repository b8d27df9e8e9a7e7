package main_test

import (
	"net/http"
	"testing"
	"time"
)

// TestStaleFollowerStopsServingLocalReads: a follower cut off from the
// rest (both other nodes frozen with SIGSTOP) serves resourceVersion=0
// reads from its own state only until --max-stale-read has passed without
// a leader. After that such a read is answered as a linearizable one,
// which fails without a leader, and a watch is refused with 503; once the
// others resume it serves again.
func TestStaleFollowerStopsServingLocalReads(t *testing.T) {
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
