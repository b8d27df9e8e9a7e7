package trustplane

import (
	_ "embed"
	"strings"

	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/fsm/backup"
)

//go:embed VERSION
var versionFile string

// commit is the commit the binary was built from, stamped by the Makefile's
// build, image and release targets; empty in a plain go build.
var commit string

// Release is the release this tree builds, from VERSION ("0.1.0-dev").
func Release() string { return strings.TrimSpace(versionFile) }

// Commit is the commit the binary was built from, or "" when nothing
// stamped it.
func Commit() string { return commit }

// Version is the release as a semantic version with its "v", and the
// commit as build metadata when one was stamped ("v0.1.0-dev+0598eec335d5"):
// what a backup's header records as the version that took it.
func Version() string {
	if commit == "" {
		return "v" + Release()
	}
	return "v" + Release() + "+" + commit
}

// Format is a persisted or exchanged format, the newest version of it
// this build writes, and the versions it reads. A node writes Version
// only once every member of its cluster reads it (the cluster version,
// cluster/formats.go), and an older version until then.
type Format struct {
	Name    string        `json:"name"`
	Version int           `json:"version"`
	Reads   cluster.Reads `json:"reads"`
}

// Formats are the versions of every format a node writes that another
// node, or another build, must read: Raft log entries, fsm snapshots,
// backup files, the internal RPC and forwarded writes. Each is defined, with the rule that
// changes it, where it is written; this is only their list.
func Formats() []Format {
	return []Format{
		{cluster.FormatRaftEntry, fsm.CommandVersion, cluster.Reads{Min: fsm.CommandVersion, Max: fsm.CommandVersion}},
		{cluster.FormatSnapshot, fsm.SnapshotVersion, cluster.Reads{Min: fsm.SnapshotVersion, Max: fsm.SnapshotVersion}},
		{cluster.FormatBackup, backup.FormatVersion, cluster.Reads{Min: backup.FormatVersion, Max: backup.FormatVersion}},
		{cluster.FormatRPC, cluster.RPCVersion, cluster.Reads{Min: 1, Max: cluster.RPCVersion}},
		{cluster.FormatForwarded, cluster.ForwardedVersion, cluster.Reads{Min: 1, Max: cluster.ForwardedVersion}},
	}
}

// FormatReads is Formats as the cluster advertises it (cluster.Config.Formats).
func FormatReads() map[string]cluster.Reads {
	out := map[string]cluster.Reads{}
	for _, f := range Formats() {
		out[f.Name] = f.Reads
	}
	return out
}
