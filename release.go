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

// Format is a persisted or exchanged format and the version of it this
// build writes (and the newest it reads).
type Format struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// Formats are the versions of every format a node writes that another
// node, or another build, must read: Raft log entries, fsm snapshots,
// backup files and the internal RPC's requests. Each is defined, with the
// rule that changes it, where it is written; this is only their list.
func Formats() []Format {
	return []Format{
		{"raft-entry", fsm.CommandVersion},
		{"snapshot", fsm.SnapshotVersion},
		{"backup", backup.FormatVersion},
		{"internal-rpc", cluster.RPCVersion},
	}
}
