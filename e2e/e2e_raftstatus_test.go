package e2e_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestRaftStatusEndpoint: on a three-node cluster every node answers GET
// /debug/trustplane/raft with its own name, exactly one says it leads,
// all name that leader, kubectl get --raw reads it, and a user outside
// system:masters gets 403.
func TestRaftStatusEndpoint(t *testing.T) {
	nodes := startCluster(t, 3)
	admins := adminClients(t, nodes)
	var leaders int
	var leader string
	waitFor(t, 30*time.Second, "every node to name the same leader", func() bool {
		leaders, leader = 0, ""
		for i, n := range nodes {
			st, err := raftStatus(admins[i], n)
			if err != nil {
				t.Fatalf("%s: %v", n.name, err)
			}
			if st.Node != n.name {
				t.Fatalf("%s answered for %q", n.name, st.Node)
			}
			if st.Leader == "" || leader != "" && st.Leader != leader || st.LeaderChanges < 1 {
				return false
			}
			leader = st.Leader
			if st.State == "Leader" {
				leaders++
				if st.Leader != n.name || st.LastContact != 0 {
					t.Fatalf("%s leads but reports leader %q, last contact %v", n.name, st.Leader, st.LastContact)
				}
			} else if st.LastContact < 0 {
				t.Fatalf("%s follows %s but never heard from it", n.name, st.Leader)
			}
		}
		return leaders == 1
	})

	// The operator's way in (README): kubectl get --raw.
	if out := nodes[1].mustKubectl("get", "--raw", "/debug/trustplane/raft"); !strings.Contains(out, `"node":"`+nodes[1].name+`"`) {
		t.Fatalf("kubectl get --raw on %s: %s", nodes[1].name, out)
	}

	tr, err := rest.TransportFor(nodes[0].userConfig(t, "bob", "developers"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(nodes[0].url() + "/debug/trustplane/raft")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a user outside system:masters got %s, want 403", resp.Status)
	}
}
