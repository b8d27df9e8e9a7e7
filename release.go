package trustplane

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// commit is the commit the binary was built from, stamped by the Makefile's
// image and release targets; empty in a plain go build.
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
