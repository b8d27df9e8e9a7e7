package cluster

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/trustplane/trustplane/fsm"
)

// gatherNode reads one node's collector as a scrape would: the value of
// every gauge and counter, and the sample count of every histogram.
func gatherNode(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(n.Collector()); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				out[f.GetName()] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[f.GetName()] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[f.GetName()] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestRaftCollector: on a three-node cluster each node reports its own
// raft view (one leader, two followers that know it, one term), the
// applied index covers the writes, and the leader's histograms count its
// applies, its log appends and the snapshot it took.
func TestRaftCollector(t *testing.T) {
	c := newInmemCluster(t, 3, true)
	li := c.leader(t)
	leader := c.nodes[li]
	ctx := testCtx(t)
	var last uint64
	for i := range 5 {
		res, err := leader.Propose(ctx, putCmd(fmt.Sprintf("k%d", i), "v"))
		if err != nil {
			t.Fatal(err)
		}
		last = res.Revision
	}
	if err := leader.snapshot(); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.nodes {
		waitFor(t, n.cfg.NodeName+" to apply the writes", func() bool { return n.AppliedIndex() >= last })
		m := gatherNode(t, n)
		isLeader := 0.0
		if i == li {
			isLeader = 1
		}
		type check struct {
			name string
			ok   bool
		}
		checks := []check{
			{"trustplane_raft_is_leader names the leader alone", m["trustplane_raft_is_leader"] == isLeader},
			{"trustplane_raft_has_leader is 1 on every node", m["trustplane_raft_has_leader"] == 1},
			{"trustplane_raft_term is the leader's term", m["trustplane_raft_term"] == float64(leader.raft.CurrentTerm())},
			{"trustplane_raft_leader_changes_seen_total counts the first leader", m["trustplane_raft_leader_changes_seen_total"] >= 1},
			{"trustplane_raft_applied_index covers the writes", m["trustplane_raft_applied_index"] >= float64(last)},
			{"trustplane_raft_commit_index is at least the applied index", m["trustplane_raft_commit_index"] >= m["trustplane_raft_applied_index"]},
			{"trustplane_raft_last_index is at least the commit index", m["trustplane_raft_last_index"] >= m["trustplane_raft_commit_index"]},
			{"every node appended to its log", m["trustplane_raft_wal_fsync_duration_seconds"] >= 1},
			{"the replication lag is commit minus applied", m["trustplane_raft_replication_lag_entries"] == max(0, m["trustplane_raft_commit_index"]-m["trustplane_raft_applied_index"])},
			{"no node is a replica", m["trustplane_raft_replica"] == 0},
		}
		if i == li {
			checks = append(checks,
				check{"the leader observed each apply", m["trustplane_raft_apply_duration_seconds"] >= 5},
				check{"the leader's snapshot was timed", m["trustplane_raft_snapshot_save_duration_seconds"] >= 1},
				check{"the leader's last contact is 0", m["trustplane_raft_last_contact_seconds"] == 0},
			)
		}
		for _, ck := range checks {
			if !ck.ok {
				t.Errorf("%s: %s; got %v", n.cfg.NodeName, ck.name, m)
			}
		}
	}
}

// TestTimedLogStoreKeepsMonotonic: raft reads MonotonicLogStore by type
// assertion, so the timing wrapper must report what the store it wraps
// reports (raft-wal is monotonic; a plain store is not).
func TestTimedLogStoreKeepsMonotonic(t *testing.T) {
	h := newRaftMetrics().fsync
	tests := []struct {
		name  string
		store raft.LogStore
		want  bool
	}{
		{"a monotonic store stays monotonic", &raft.MockMonotonicLogStore{}, true},
		{"a plain store stays plain", raft.NewInmemStore(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (&timedLogStore{LogStore: tt.store, h: h}).IsMonotonic(); got != tt.want {
				t.Fatalf("IsMonotonic = %v, want %v", got, tt.want)
			}
		})
	}
}

// bufSink is a raft.SnapshotSink into memory.
type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Cancel() error { return nil }
func (*bufSink) Close() error  { return nil }

// raft asserts BatchingFSM on the fsm it is given: the timing wrapper must
// keep it, or every entry would be applied alone.
var _ raft.BatchingFSM = timedFSM{}

// TestTimedFSMRestore: a restore that loads is timed once; one that fails
// is not, and says why.
func TestTimedFSMRestore(t *testing.T) {
	h := newRaftMetrics().restore
	count := func() uint64 {
		var m dto.Metric
		if err := h.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	snap, err := fsm.New().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	f := timedFSM{FSM: fsm.New(), h: h}
	if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != 1 {
		t.Fatalf("after a restore: %d observations, want 1", got)
	}
	if err := f.Restore(io.NopCloser(strings.NewReader("not a snapshot"))); err == nil {
		t.Fatal("a garbage snapshot restored")
	}
	if got := count(); got != 1 {
		t.Fatalf("after a failed restore: %d observations, want 1", got)
	}
}
