package cluster

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trustplane/trustplane/fsm"
)

// TestClusterFormats: the cluster's version of a format is the newest this
// build and every member of the raft configuration read; a member that
// advertises nothing, or does not answer, reads version 1; a node only
// gossip knows does not count, and no peer raises a format above this
// build's newest.
func TestClusterFormats(t *testing.T) {
	own := map[string]Reads{FormatRPC: {1, 2}, FormatRaftEntry: {1, 1}}
	member := func(name string, formats map[string]Reads) Member {
		return Member{Name: name, Configured: true, Voter: true, RaftState: "Follower", Formats: formats}
	}
	silent := Member{Name: "n9", Configured: true, RaftState: "unknown"}
	tests := []struct {
		name    string
		members []Member
		want    map[string]int
		behind  string // a substring of the internal-rpc Behind line
	}{
		{"every member reads version 2", []Member{member("n1", own), member("n2", own), member("n3", own), {Name: "r1", Configured: true, Replica: true, RaftState: "Follower", Formats: own}},
			map[string]int{FormatRPC: 2, FormatRaftEntry: 1}, ""},
		{"a member of an older build advertises nothing", []Member{member("n1", own), member("n2", nil)},
			map[string]int{FormatRPC: 1, FormatRaftEntry: 1}, "n2 reads up to 1 (its build advertises no version of it)"},
		{"a member reads version 1 only", []Member{member("n1", own), member("n2", map[string]Reads{FormatRPC: {1, 1}})},
			map[string]int{FormatRPC: 1, FormatRaftEntry: 1}, "n2 reads up to 1"},
		{"a member that does not answer holds it back", []Member{member("n1", own), silent},
			map[string]int{FormatRPC: 1, FormatRaftEntry: 1}, "n9 did not answer"},
		{"a replica counts as a voter does", []Member{member("n1", own), {Name: "r1", Configured: true, Replica: true, RaftState: "Follower"}},
			map[string]int{FormatRPC: 1, FormatRaftEntry: 1}, "r1 reads up to 1"},
		{"a node only gossip knows does not count", []Member{member("n1", own), {Name: "new", RaftState: "Follower"}},
			map[string]int{FormatRPC: 2, FormatRaftEntry: 1}, ""},
		{"no peer raises a format above this build's", []Member{member("n1", own), member("n2", map[string]Reads{FormatRPC: {1, 9}, FormatRaftEntry: {1, 5}})},
			map[string]int{FormatRPC: 2, FormatRaftEntry: 1}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]int{}
			var behind []string
			configured := 0
			for _, m := range tc.members {
				if m.Configured {
					configured++
				}
			}
			for _, f := range clusterFormats(own, tc.members) {
				got[f.Name] = f.Version
				if f.Members != configured {
					t.Fatalf("%s counted %d members, want %d", f.Name, f.Members, configured)
				}
				if f.Name == FormatRPC {
					behind = f.Behind
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("versions %v, want %v", got, tc.want)
			}
			if line := strings.Join(behind, "; "); (tc.behind == "") != (line == "") || !strings.Contains(line, tc.behind) {
				t.Fatalf("behind %q, want %q", line, tc.behind)
			}
		})
	}
}

// TestAdvertised: what a peer reports is bounded before it is believed.
func TestAdvertised(t *testing.T) {
	many := map[string]Reads{}
	for i := range maxAdvertisedFormats + 1 {
		many[strings.Repeat("f", i+1)] = Reads{1, 2}
	}
	tests := []struct {
		name string
		in   map[string]Reads
		want map[string]Reads
	}{
		{"none", nil, nil},
		{"a well-formed one", map[string]Reads{FormatRPC: {1, 2}}, map[string]Reads{FormatRPC: {1, 2}}},
		{"a range that is no range", map[string]Reads{FormatRPC: {3, 2}, FormatBackup: {1, 1}}, map[string]Reads{FormatBackup: {1, 1}}},
		{"version 0", map[string]Reads{FormatRPC: {0, 2}}, map[string]Reads{}},
		{"a name too long", map[string]Reads{strings.Repeat("x", 65): {1, 2}}, map[string]Reads{}},
		{"too many formats", many, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := advertised(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("advertised = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSubmitFrameVersions: a follower sends its proposals as binary frames
// (internal RPC version 2) once every member reads them, and as JSON
// before; a leader that reads version 1 only refuses a binary frame
// before acting on it, and the follower sends the same proposals again
// as version 1: each write applies once, and the follower writes version
// 1 until it finds the cluster's versions again.
func TestSubmitFrameVersions(t *testing.T) {
	ctx := testCtx(t)
	t.Run("every member reads version 2", func(t *testing.T) {
		_, l, f := submitCluster(t, map[string]Reads{FormatRPC: {1, 2}})
		if v := f.node.clusterVersion(FormatRPC); v != 2 {
			t.Fatalf("the cluster's internal-rpc version is %d, want 2", v)
		}
		before := f.node.proposals.binary.Load()
		res, err := f.node.Submit(ctx, putCmd("binary", "v"))
		if err != nil || res.Err != nil {
			t.Fatalf("Submit: %v %+v", err, res)
		}
		if f.node.proposals.binary.Load() == before || f.node.proposals.refused.Load() != 0 {
			t.Fatalf("no binary frame was sent (%d refused)", f.node.proposals.refused.Load())
		}
		if kv, _, _ := l.fsm.Get(testKey("binary"), 0); kv == nil || kv.ModRevision != res.Revision || string(kv.Value) != "v" {
			t.Fatalf("the leader holds %+v", kv)
		}
		// A precondition judged by the leader comes back over a binary
		// answer as it does over JSON.
		taken := putCmd("binary", "again")
		taken.MustNotExist = true
		res, err = f.node.Submit(ctx, taken)
		if err != nil || !errors.Is(res.Err, fsm.ErrExists) {
			t.Fatalf("Submit of a taken name: %v %+v, want the fsm's verdict", err, res)
		}
	})
	t.Run("a member reads version 1 only", func(t *testing.T) {
		_, _, f := submitCluster(t, map[string]Reads{FormatRPC: {1, 1}})
		if v := f.node.clusterVersion(FormatRPC); v != 1 {
			t.Fatalf("the cluster's internal-rpc version is %d, want 1", v)
		}
		before := f.node.proposals.binary.Load()
		if res, err := f.node.Submit(ctx, putCmd("json", "v")); err != nil || res.Err != nil {
			t.Fatalf("Submit: %v %+v", err, res)
		}
		if f.node.proposals.binary.Load() != before {
			t.Fatal("a binary frame was sent to a cluster that reads version 1")
		}
	})
	t.Run("a leader rolled back refuses a binary frame", func(t *testing.T) {
		_, l, f := submitCluster(t, map[string]Reads{FormatRPC: {1, 1}})
		// The follower still believes what it found before the leader
		// went back to a build of version 1.
		f.node.setFormats([]ClusterFormat{{Name: FormatRPC, Version: 2, Newest: 2}})
		received := testutil.ToFloat64(l.node.metrics.received)
		res, err := f.node.Submit(ctx, putCmd("refused-then-sent", "v"))
		if err != nil || res.Err != nil {
			t.Fatalf("Submit: %v %+v", err, res)
		}
		if f.node.proposals.refused.Load() != 1 {
			t.Fatalf("%d frames refused, want 1", f.node.proposals.refused.Load())
		}
		if got := testutil.ToFloat64(l.node.metrics.received) - received; got != 1 {
			t.Fatalf("the leader proposed %v commands, want 1: the refused frame was acted on", got)
		}
		if kv, _, _ := l.fsm.Get(testKey("refused-then-sent"), 0); kv == nil || kv.ModRevision != res.Revision || kv.CreateRevision != res.Revision {
			t.Fatalf("the leader holds %+v, want one write at %d", kv, res.Revision)
		}
		if v := f.node.clusterVersion(FormatRPC); v != 1 {
			t.Fatalf("after the refusal the follower writes internal-rpc %d, want 1", v)
		}
		before := f.node.proposals.binary.Load()
		if _, err := f.node.Submit(ctx, putCmd("after-refusal", "v")); err != nil {
			t.Fatal(err)
		}
		if f.node.proposals.binary.Load() != before {
			t.Fatal("a binary frame was sent again after the refusal")
		}
	})
}

// TestClusterFormatsNeedTheConfiguration: a node whose configuration
// does not hold it (here: before any cluster formed) counts no one, so it
// finds no versions and goes on writing version 1.
func TestClusterFormatsNeedTheConfiguration(t *testing.T) {
	c := newHACluster(t)
	n := c.add("alone", haOpts{mutate: func(cfg *Config) { cfg.Formats = map[string]Reads{FormatRPC: {1, 2}} }})
	if _, err := n.node.ClusterFormats(testCtx(t)); !errors.Is(err, ErrNotMember) {
		t.Fatalf("ClusterFormats outside the configuration: %v, want ErrNotMember", err)
	}
	if v := n.node.clusterVersion(FormatRPC); v != 1 {
		t.Fatalf("internal-rpc %d outside the configuration, want 1", v)
	}
}
