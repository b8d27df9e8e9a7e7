package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/trustplane/trustplane/chaos/report"
)

// catchUpWithin bounds how long after a fault's recovery every node may
// take to apply what the leader had committed then. A healthy follower
// takes well under a second (a snapshot install a few); a follower that
// receives heartbeats but no entries (hashicorp/raft#612, met by seed
// 1796236270951533177 for 108 s) never does, and looks ready meanwhile.
const catchUpWithin = 30 * time.Second

// raftIndexes is what catch-up reads of a node's GET /debug/trustplane/raft.
type raftIndexes struct {
	Node         string `json:"node"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
}

// indexes asks node i for its raft indexes.
func (m *monitor) indexes(i int) (raftIndexes, error) {
	var st raftIndexes
	resp, err := m.clients[i].Get(m.hosts[i] + "/debug/trustplane/raft")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /debug/trustplane/raft: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// awaitCatchUp waits, for at most within, until every node has applied
// the commit index of the leader of the highest term at the call. It
// returns "" then, or which nodes were still behind and by how much.
func (m *monitor) awaitCatchUp(within time.Duration) string {
	deadline := time.Now().Add(within)
	l, ok := m.poll()
	for !ok || l.CommitIndex == 0 {
		if time.Now().After(deadline) {
			return "no leader answered after the fault was undone"
		}
		time.Sleep(200 * time.Millisecond)
		l, ok = m.poll()
	}
	target := l.CommitIndex
	behind := ""
	for {
		behind = ""
		for i, name := range m.names {
			st, err := m.indexes(i)
			switch {
			case err != nil:
				behind += fmt.Sprintf(" %s: %v;", name, err)
			case st.AppliedIndex < target:
				behind += fmt.Sprintf(" %s applied %d;", name, st.AppliedIndex)
			}
		}
		if behind == "" {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%s after recovery, the leader's commit index then was %d, and:%s", within, target, behind)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// catchUpCheck fails for each fault after which some node did not apply,
// within catchUpWithin, what the leader had committed when the cluster
// was ready again.
func catchUpCheck(faults []report.Fault) report.Check {
	c := report.Check{Name: "catch-up", OK: true}
	for _, f := range faults {
		if f.Behind != "" {
			c.OK = false
			c.Violations = append(c.Violations, fmt.Sprintf("%s on %s: %s", f.Name, f.Node, f.Behind))
		}
	}
	if len(faults) == 0 {
		c.Skipped = "no fault in this run"
	}
	return c
}
