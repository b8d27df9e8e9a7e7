package failpoint

import (
	"fmt"
	"strings"
	"time"
)

// FileName is the control file's name inside a node's data directory.
// Writers should replace it atomically (write a temporary file in the same
// directory, then rename it over), so a node never reads half a file.
const FileName = "failpoints"

// RefreshInterval is how often, at most, a node re-reads FileName: a change
// takes effect within about this long.
const RefreshInterval = 100 * time.Millisecond

// MaxFsyncDelay bounds fsync-delay, so a typo cannot stall a node for good.
const MaxFsyncDelay = time.Minute

// State is one setting of every failpoint. The zero State is all off. It
// is defined in every build, so a chaos tool built without the tag can
// still write the file.
type State struct {
	// FsyncDelay is slept before each log append, stable-store write and
	// snapshot Close.
	FsyncDelay time.Duration
	// DiskFull fails log appends and snapshot writes with ErrDiskFull.
	DiskFull bool
	// DiskFullStable also fails stable-store writes; it implies DiskFull.
	// hashicorp/raft panics when it cannot save a new term (see doc.go).
	DiskFullStable bool
}

// Off reports whether no failpoint is on.
func (s State) Off() bool { return s == State{} }

// Marshal returns s as the contents of FileName.
func (s State) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "fsync-delay=%s\n", s.FsyncDelay)
	fmt.Fprintf(&b, "disk-full=%t\n", s.DiskFull)
	fmt.Fprintf(&b, "disk-full-stable=%t\n", s.DiskFullStable)
	return []byte(b.String())
}

// String is the state on one line, for logs.
func (s State) String() string {
	return fmt.Sprintf("fsync-delay=%s disk-full=%t disk-full-stable=%t", s.FsyncDelay, s.DiskFull, s.DiskFullStable)
}
