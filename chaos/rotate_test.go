package chaos

import (
	"testing"

	"github.com/trustplane/trustplane/chaos/report"
)

func TestRotationCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		faults  []report.Fault
		ok      bool
		skipped bool
	}{
		{"no rotation", []report.Fault{{Name: "kill"}}, true, true},
		{"every rotation took its steps", []report.Fault{{Name: "rotate", Node: "node-ca rotate"}, {Name: "kill", Err: "a kill failed"}}, true, false},
		{"a rotation failed", []report.Fault{{Name: "rotate", Node: "node-ca rotate"}, {Name: "rotate", Node: "signing-key rotate", Err: "promote: 409"}}, false, false},
		{"the election of the leader a rotation killed", []report.Fault{{Name: "rotate", Node: "signing-key rotate", Leader: true, Elections: 1, LeaderChanges: 1}}, true, false},
		{"that election in two rounds", []report.Fault{{Name: "rotate", Node: "signing-key rotate", Leader: true, Elections: 2, LeaderChanges: 1}}, true, false},
		{"an election a rotation caused", []report.Fault{{Name: "rotate", Node: "cluster-ca rotate", Elections: 1}, {Name: "rotate", Node: "node-ca rotate"}}, false, false},
		{"a member flapped", []report.Fault{{Name: "rotate", Node: "gossip-key rotate", Flaps: []string{"n1 saw n2 suspect"}}}, false, false},
		{"two leaders after one leader kill", []report.Fault{{Name: "rotate", Node: "node-ca rotate", Leader: true, Elections: 2, LeaderChanges: 2}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rotationCheck(tc.faults)
			if c.OK != tc.ok || (c.Skipped != "") != tc.skipped {
				t.Fatalf("rotationCheck = %+v", c)
			}
			if !tc.ok && len(c.Violations) != 1 {
				t.Fatalf("violations %v, want the failed rotation", c.Violations)
			}
		})
	}
}
