package cluster

import (
	"io"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustplane/trustplane/fsm"
)

// Prometheus metrics of this node's raft (served by the api at /metrics).
// The names are trustplane_raft_*; where etcd has a figure an etcd operator
// already watches, the help text names it (etcd_server_is_leader,
// etcd_server_has_leader, etcd_server_leader_changes_seen_total,
// etcd_disk_wal_fsync_duration_seconds,
// etcd_debugging_snap_save_total_duration_seconds), and the meaning is
// the same.
//
// The gauges and counters are read from the node when scraped (Status, and
// raft's last index), so keeping them costs nothing between scrapes. The
// histograms are recorded by the node as it works: one observation per
// Propose that applied, per batch raft appends to its log, and per
// snapshot written. Every figure is this node's own, never the leader's.

// raftMetrics are the histograms the node records itself. Each Node has
// its own, so that several nodes in one process (tests) never mix their
// figures.
type raftMetrics struct {
	// apply: Propose, from handing the entry to raft until this node's
	// FSM has applied it (replication, fsync on a quorum, apply).
	apply prometheus.Histogram
	// fsync: one append of a batch of entries to the raft log (raft-wal:
	// one write and one fsync), on the leader and on followers.
	fsync prometheus.Histogram
	// snapshot: writing one snapshot into the snapshot store, from
	// Create to a successful Close (persisting the fsm's state, or
	// receiving a snapshot the leader sends).
	snapshot prometheus.Histogram
	// restore: loading a snapshot into the fsm (at start, or one the
	// leader sent), from raft's call to its end.
	restore prometheus.Histogram
	// submitted: writes this node had the leader propose (Submit), by
	// outcome: applied, retried (nothing written; sent again) or unknown
	// (sent, no answer).
	submitted *prometheus.CounterVec
	// received: proposals this node took from other nodes as leader.
	received prometheus.Counter
}

// diskBuckets are etcd's buckets for its disk histograms: 1 ms to 8 s.
var diskBuckets = prometheus.ExponentialBuckets(0.001, 2, 14)

func newRaftMetrics() *raftMetrics {
	return &raftMetrics{
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "trustplane_raft_apply_duration_seconds",
			Help: "Time from handing a write to raft until this node's state machine applied it: replication, the log fsync on a quorum and the apply. Recorded by the leader for every write that applied.",
			// 0.5 ms to 16 s: a group commit on a local disk takes a few
			// milliseconds; the top is ApplyTimeout's order.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trustplane_raft_wal_fsync_duration_seconds",
			Help:    "Time to append one batch of entries to the raft log: one write and one fsync (etcd_disk_wal_fsync_duration_seconds).",
			Buckets: diskBuckets,
		}),
		snapshot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "trustplane_raft_snapshot_save_duration_seconds",
			Help:    "Time to write one raft snapshot to disk, taken here or received from the leader (etcd_debugging_snap_save_total_duration_seconds).",
			Buckets: diskBuckets,
		}),
		restore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "trustplane_raft_snapshot_restore_duration_seconds",
			Help: "Time to load one raft snapshot into this node's state machine: at start, or one received from the leader when this node fell behind its log.",
			// 1 ms to 16 s: a million objects restore in seconds.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_raft_submitted_total",
			Help: "Writes this node executed and had the leader propose over the internal RPC (--execute-writes=local), by outcome: applied, retried (the leader could not take it; nothing was written) or unknown (sent and unanswered).",
		}, []string{"outcome"}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trustplane_raft_proposals_received_total",
			Help: "Writes other nodes executed and this node, as leader, proposed for them.",
		}),
	}
}

// Descriptions of the figures read at scrape time.
var (
	descTerm = prometheus.NewDesc("trustplane_raft_term",
		"The raft term this node is in.", nil, nil)
	descIsLeader = prometheus.NewDesc("trustplane_raft_is_leader",
		"1 while this node is the raft leader, else 0 (etcd_server_is_leader).", nil, nil)
	descHasLeader = prometheus.NewDesc("trustplane_raft_has_leader",
		"1 while this node knows a leader, else 0 (etcd_server_has_leader).", nil, nil)
	descLeaderChanges = prometheus.NewDesc("trustplane_raft_leader_changes_seen_total",
		"Times this node came to know a leader since it started, the first one included (etcd_server_leader_changes_seen_total).", nil, nil)
	descElections = prometheus.NewDesc("trustplane_raft_elections_total",
		"Times this node became a candidate since it started (pre-vote rounds included).", nil, nil)
	descLastIndex = prometheus.NewDesc("trustplane_raft_last_index",
		"Index of the last entry in this node's raft log.", nil, nil)
	descCommitIndex = prometheus.NewDesc("trustplane_raft_commit_index",
		"The raft commit index as this node knows it.", nil, nil)
	descAppliedIndex = prometheus.NewDesc("trustplane_raft_applied_index",
		"Index of the last entry this node's state machine applied: the newest resourceVersion it can serve.", nil, nil)
	descLastContact = prometheus.NewDesc("trustplane_raft_last_contact_seconds",
		"How long ago this node heard from the leader: 0 on the leader; absent on a follower that never has.", nil, nil)
	descReplicationLag = prometheus.NewDesc("trustplane_raft_replication_lag_entries",
		"Committed entries this node has yet to apply: how far its local reads are behind, as of its last contact with the leader.", nil, nil)
	descReplica = prometheus.NewDesc("trustplane_raft_replica",
		"1 on a read replica (--role replica, a raft non-voter), else 0.", nil, nil)
	descReadRounds = prometheus.NewDesc("trustplane_raft_read_index_rounds_total",
		"Read-index rounds this node ran: kind local is a leadership check by a heartbeat round on the leader, kind remote a follower's request for the leader's read index. Concurrent reads share rounds.", []string{"kind"}, nil)
	descFormatVersion = prometheus.NewDesc("trustplane_cluster_format_version",
		"The version of each format this node writes for others to read: the newest that it and every member of the raft configuration read (the cluster version, formats.go).", []string{"format"}, nil)
	descReadJoins = prometheus.NewDesc("trustplane_raft_read_index_requests_total",
		"Reads (and, with --execute-writes=local, writes) that needed a read index, by the kind of round they joined; divided by the rounds, the sharing ratio.", []string{"kind"}, nil)
)

// raftCollector reports a node's raft figures.
type raftCollector struct{ n *Node }

// Collector returns the prometheus collector of this node's raft figures.
// It reads the node when scraped and never blocks: Status takes none of
// this package's locks and does no I/O.
func (n *Node) Collector() prometheus.Collector { return raftCollector{n: n} }

// Describe implements prometheus.Collector.
func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTerm, descIsLeader, descHasLeader, descLeaderChanges,
		descElections, descLastIndex, descCommitIndex, descAppliedIndex, descLastContact, descReplicationLag, descReplica,
		descReadRounds, descReadJoins, descFormatVersion} {
		ch <- d
	}
	c.n.metrics.apply.Describe(ch)
	c.n.metrics.fsync.Describe(ch)
	c.n.metrics.snapshot.Describe(ch)
	c.n.metrics.restore.Describe(ch)
	c.n.metrics.submitted.Describe(ch)
	c.n.metrics.received.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Status()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(descTerm, float64(st.Term))
	gauge(descIsLeader, flag(st.State == raft.Leader.String()))
	gauge(descHasLeader, flag(st.Leader != ""))
	counter(descLeaderChanges, st.LeaderChanges)
	counter(descElections, st.Elections)
	gauge(descLastIndex, float64(c.n.raft.LastIndex()))
	gauge(descCommitIndex, float64(st.CommitIndex))
	gauge(descAppliedIndex, float64(st.AppliedIndex))
	gauge(descReplicationLag, float64(st.ReplicationLag()))
	gauge(descReplica, flag(st.Replica))
	if st.LastContact >= 0 {
		gauge(descLastContact, st.LastContact.Seconds())
	}
	for kind, q := range map[string]*roundQueue{"local": &c.n.local, "remote": &c.n.remote} {
		ch <- prometheus.MustNewConstMetric(descReadRounds, prometheus.CounterValue, float64(q.rounds.Load()), kind)
		ch <- prometheus.MustNewConstMetric(descReadJoins, prometheus.CounterValue, float64(q.joins.Load()), kind)
	}
	for name := range c.n.cfg.Formats {
		ch <- prometheus.MustNewConstMetric(descFormatVersion, prometheus.GaugeValue, float64(c.n.clusterVersion(name)), name)
	}
	c.n.metrics.apply.Collect(ch)
	c.n.metrics.fsync.Collect(ch)
	c.n.metrics.snapshot.Collect(ch)
	c.n.metrics.restore.Collect(ch)
	c.n.metrics.submitted.Collect(ch)
	c.n.metrics.received.Collect(ch)
}

// timedLogStore times the appends to raft's log (metrics.fsync). It keeps
// every other behaviour of the store it wraps, IsMonotonic included, which
// raft reads by type assertion.
type timedLogStore struct {
	raft.LogStore
	h prometheus.Histogram
}

var _ raft.MonotonicLogStore = (*timedLogStore)(nil)

func (s *timedLogStore) StoreLog(log *raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLog(log)
	if err == nil {
		s.h.Observe(time.Since(start).Seconds())
	}
	return err
}

func (s *timedLogStore) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	err := s.LogStore.StoreLogs(logs)
	if err == nil {
		s.h.Observe(time.Since(start).Seconds())
	}
	return err
}

// IsMonotonic reports what the wrapped store reports (raft-wal: true).
func (s *timedLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// timedSnapshotStore times each snapshot from Create to a successful Close
// of its sink (metrics.snapshot).
type timedSnapshotStore struct {
	raft.SnapshotStore
	h prometheus.Histogram
}

func (s *timedSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &timedSink{SnapshotSink: sink, h: s.h, start: time.Now()}, nil
}

type timedSink struct {
	raft.SnapshotSink
	h     prometheus.Histogram
	start time.Time
}

func (s *timedSink) Close() error {
	err := s.SnapshotSink.Close()
	if err == nil {
		s.h.Observe(time.Since(s.start).Seconds())
	}
	return err
}

// timedFSM times each Restore of the fsm (metrics.restore); raft sees the
// fsm's other methods (Apply, ApplyBatch, Snapshot) unchanged.
type timedFSM struct {
	*fsm.FSM
	h prometheus.Histogram
}

// Restore implements raft.FSM.
func (f timedFSM) Restore(rc io.ReadCloser) error {
	start := time.Now()
	err := f.FSM.Restore(rc)
	if err == nil {
		f.h.Observe(time.Since(start).Seconds())
	}
	return err
}
