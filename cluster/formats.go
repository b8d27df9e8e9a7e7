package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The cluster version. Every format a node writes for another node to
// read has a version, and a node writes a newer version of a format only
// once every member of the raft configuration, voter or replica, reads it:
// the rule of Consul's autopilot and of etcd's cluster version. Each node
// advertises the versions its build reads (Config.Formats) in the stats
// RPC; a node that advertises none runs a build from before formats were
// advertised, and reads version 1 of each, the only one there was. So in
// a rolling upgrade the new build goes on writing what the old one reads
// until the last old node is gone, and a rollback (one node back to the
// old build) takes the cluster back to the old version at the next
// refresh.
//
// What a format's version means, and which versions a build writes, is
// decided where the format is written (fsm for entries and snapshots,
// fsm/backup for backups, rpc.go for the internal RPC); this file only
// finds the version the whole cluster reads. A persisted format (an
// entry, a snapshot, a backup) may gain a version only in a release whose
// predecessor reads it already (the specification's rule 4b): the cluster
// version keeps a mixed cluster safe, and that rule keeps a rollback
// safe once the log holds the new version.

// Format names, as the stats RPC, /version and trustplane version give
// them.
const (
	FormatRaftEntry = "raft-entry"
	FormatSnapshot  = "snapshot"
	FormatBackup    = "backup"
	FormatRPC       = "internal-rpc"
	FormatForwarded = "forwarded-request"
)

// ForwardedVersion is the version of a forwarded write (leader
// forwarding, --execute-writes=leader): the value of its
// X-Trustplane-Forwarded-By header, and the X-Remote-* headers that carry
// the caller's identity beside it. api/forward.go writes and reads it;
// every build before the version had a name sent "1", which is version 1.
const ForwardedVersion = 1

// Reads is the range of versions of one format that a build reads.
type Reads struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// legacyReads is what a node that advertises no formats reads.
var legacyReads = Reads{Min: 1, Max: 1}

// maxAdvertisedFormats bounds what a peer's advertisement may hold: a
// node certificate speaks for a peer, but what it reports is only a
// number to compare, never a reason to allocate.
const maxAdvertisedFormats = 32

// formatRefresh is how often each node finds the cluster's versions
// again. A node rolled back to an older build is seen within it; until
// then a frame in the newer format sent to it is refused and sent again
// in the older one (proposeBatch), so the bound is one of cost, not of
// safety. A change of the raft configuration (a member added, removed or
// made a voter) is seen within formatConfigPoll, and the versions are
// found again at once.
const (
	formatRefresh    = 10 * time.Second
	formatConfigPoll = time.Second
)

// ClusterFormat is one format's version in the whole cluster.
type ClusterFormat struct {
	Name string `json:"name"`
	// Version is the newest version that this build and every member of
	// the raft configuration read: what the cluster writes.
	Version int `json:"version"`
	// Newest is the newest version this build reads.
	Newest int `json:"newest"`
	// Members is how many members of the raft configuration were
	// counted (this node among them).
	Members int `json:"members"`
	// Behind says which members keep Version below Newest, and why
	// ("n3 reads up to 1", "n2 did not answer"), sorted; empty when none
	// does.
	Behind []string `json:"behind,omitempty"`
}

// ClusterFormats finds, for each format this build reads (Config.Formats),
// the newest version every member of the raft configuration reads, from
// the members' answers to the stats RPC (Members). A member that does not
// answer counts as reading version 1 only: a version is never assumed.
// It fails with ErrNotMember while the configuration this node knows does
// not hold it (before the cluster has formed, or after a removal): the
// members it would count are then not the cluster's.
func (n *Node) ClusterFormats(ctx context.Context) ([]ClusterFormat, error) {
	ms, err := n.Members(ctx)
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.Name == n.cfg.NodeName }); i < 0 || !ms[i].Configured {
		return nil, fmt.Errorf("%w: the configuration this node knows does not hold it", ErrNotMember)
	}
	return clusterFormats(n.cfg.Formats, ms), nil
}

// clusterFormats is ClusterFormats over a members list.
func clusterFormats(own map[string]Reads, ms []Member) []ClusterFormat {
	names := make([]string, 0, len(own))
	for name := range own {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]ClusterFormat, 0, len(names))
	for _, name := range names {
		f := ClusterFormat{Name: name, Version: own[name].Max, Newest: own[name].Max}
		for _, m := range ms {
			if !m.Configured {
				continue
			}
			f.Members++
			r, why := m.reads(name)
			if r.Max < f.Newest {
				f.Behind = append(f.Behind, m.Name+" "+why)
			}
			f.Version = min(f.Version, r.Max)
		}
		f.Version = max(f.Version, legacyReads.Max)
		out = append(out, f)
	}
	return out
}

// reads is what m reads of format name, and how it is known.
func (m Member) reads(name string) (Reads, string) {
	if m.RaftState == "unknown" {
		return legacyReads, "did not answer"
	}
	r, ok := m.Formats[name]
	if !ok {
		return legacyReads, fmt.Sprintf("reads up to %d (its build advertises no version of it)", legacyReads.Max)
	}
	return r, fmt.Sprintf("reads up to %d", r.Max)
}

// advertised is a peer's advertisement as this node believes it: at most
// maxAdvertisedFormats formats, each a range of positive versions; a
// malformed range counts as none (legacyReads).
func advertised(in map[string]Reads) map[string]Reads {
	if len(in) == 0 || len(in) > maxAdvertisedFormats {
		return nil
	}
	out := make(map[string]Reads, len(in))
	for name, r := range in {
		if len(name) > 64 || r.Min < 1 || r.Max < r.Min {
			continue
		}
		out[name] = r
	}
	return out
}

// formatView is the cluster's versions as this node last found them (a
// refresh), lowered where a peer refused one since.
type formatView struct {
	found []ClusterFormat
}

// version is format name's version in v: legacyReads.Max for a format v
// does not hold, or a nil v (before the first refresh).
func (v *formatView) version(name string) int {
	if v != nil {
		for _, f := range v.found {
			if f.Name == name {
				return f.Version
			}
		}
	}
	return legacyReads.Max
}

// clusterVersion is the version of format name the whole cluster reads,
// as this node last found it.
func (n *Node) clusterVersion(name string) int { return n.formats.Load().version(name) }

// lowerClusterVersion records that a peer refused version ver of format
// name: until the next refresh, this node writes older versions.
func (n *Node) lowerClusterVersion(name string, ver int) {
	for {
		old := n.formats.Load()
		if old.version(name) < ver {
			return
		}
		next := &formatView{found: slices.Clone(old.found)}
		for i := range next.found {
			if next.found[i].Name == name {
				next.found[i].Version = ver - 1
			}
		}
		if n.formats.CompareAndSwap(old, next) {
			n.logger.Warn("a peer refused a format version; writing the older one until the cluster's versions are found again", "format", name, "refused", ver)
			return
		}
	}
}

// refreshFormats finds the cluster's versions every formatRefresh, and at
// once when the raft configuration changes, and logs each change of a
// version with the members that hold it back. Until it first succeeds
// the node writes version 1 of every format.
func (n *Node) refreshFormats() {
	defer n.wg.Done()
	t := time.NewTicker(formatConfigPoll)
	defer t.Stop()
	var (
		confIndex uint64
		next      time.Time // the next refresh due without a change
	)
	for {
		fut := n.raft.GetConfiguration()
		changed := fut.Error() == nil && fut.Index() != confIndex
		if changed || !time.Now().Before(next) {
			ctx, cancel := context.WithTimeout(n.ctx, 2*statsTimeout)
			fs, err := n.ClusterFormats(ctx)
			cancel()
			if err == nil {
				n.setFormats(fs)
				confIndex = fut.Index()
				next = time.Now().Add(formatRefresh)
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// setFormats publishes fs as the cluster's versions.
func (n *Node) setFormats(fs []ClusterFormat) {
	old := n.formats.Swap(&formatView{found: fs})
	for _, f := range fs {
		if was := old.version(f.Name); f.Version != was {
			n.logger.Info("the cluster's version of a format changed", "format", f.Name, "from", was, "to", f.Version, "behind", f.Behind)
		}
	}
}
