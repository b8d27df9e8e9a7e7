package chaos

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trustplane/trustplane/chaos/report"
)

// fakeRaftNode serves GET /debug/trustplane/raft with its current state.
type fakeRaftNode struct {
	name           string
	leader         bool
	commit         uint64
	applied        atomic.Uint64
	appliedPerPoll uint64 // how far it applies at each poll
}

func (f *fakeRaftNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/debug/trustplane/raft" {
		http.NotFound(w, r)
		return
	}
	st := raftIndexes{Node: f.name, State: "Follower", Term: 3, CommitIndex: f.commit, AppliedIndex: f.applied.Add(f.appliedPerPoll)}
	if f.leader {
		st.State = "Leader"
	}
	_ = json.NewEncoder(w).Encode(st)
}

func fakeMonitor(t *testing.T, nodes ...*fakeRaftNode) *monitor {
	m := &monitor{}
	for _, n := range nodes {
		srv := httptest.NewServer(n)
		t.Cleanup(srv.Close)
		m.names = append(m.names, n.name)
		m.clients = append(m.clients, srv.Client())
		m.hosts = append(m.hosts, srv.URL)
	}
	return m
}

func TestAwaitCatchUp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		perPoll    uint64 // the follower's progress per poll
		wantBehind string
	}{
		{"caught up at once", 100, ""},
		{"catches up over a few polls", 30, ""},
		{"stays behind", 0, "n2 applied 40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &fakeRaftNode{name: "n1", leader: true, commit: 100}
			l.applied.Store(100)
			f := &fakeRaftNode{name: "n2", commit: 40, appliedPerPoll: tc.perPoll}
			f.applied.Store(40)
			got := fakeMonitor(t, l, f).awaitCatchUp(time.Second)
			if (got == "") != (tc.wantBehind == "") || !strings.Contains(got, tc.wantBehind) {
				t.Fatalf("awaitCatchUp = %q, want %q", got, tc.wantBehind)
			}
		})
	}
}

func TestCatchUpCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []report.Fault
		ok     bool
		skip   bool
	}{
		{"no faults", nil, true, true},
		{"all caught up", []report.Fault{{Name: "kill", Node: "n1", CaughtUp: 5}, {Name: "full-disk", Node: "n2", CaughtUp: 9}}, true, false},
		{"one behind", []report.Fault{{Name: "kill", Node: "n1", CaughtUp: 5}, {Name: "full-disk", Node: "n2", Behind: "n2 applied 103221"}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := catchUpCheck(tc.faults)
			if c.OK != tc.ok || (c.Skipped != "") != tc.skip {
				t.Fatalf("catchUpCheck = %+v, want OK %v, skipped %v", c, tc.ok, tc.skip)
			}
			if !tc.ok && !strings.Contains(strings.Join(c.Violations, "\n"), "full-disk on n2: n2 applied 103221") {
				t.Fatalf("violations %q do not name the fault and node", c.Violations)
			}
		})
	}
}
