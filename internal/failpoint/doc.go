// Package failpoint owns the storage faults the chaos tool injects into a
// running node: a slow disk and a full disk. They exist only in a binary
// built with the build tag failpoints (go build -tags failpoints); without
// it every function here is an identity that the compiler inlines away, no
// wrapper is installed and no file is read, and Enabled is false.
//
// Control: the chaos tool writes <data-dir>/failpoints, one key=value a
// line (blank lines and lines starting with # are ignored). A missing file
// means every failpoint is off. Keys:
//
//	fsync-delay=300ms      each raft log append and stable-store write, and
//	                       each snapshot's final Close, first sleeps this long
//	disk-full=true         log appends and snapshot writes fail with ENOSPC
//	disk-full-stable=true  stable-store writes (term, vote) fail with ENOSPC
//	                       too; it implies disk-full
//
// Rules it keeps:
//
//   - The file is looked at (stat) at most every RefreshInterval, and read
//     and parsed only when it changed (another inode, modification time or
//     size), so the write path pays a clock read and an atomic load. A
//     change of state is logged at Warn.
//   - A malformed or unknown line is logged once (when the file version
//     holding it is first read) and ignored; the other lines still apply.
//   - A failing write fails before it reaches the wrapped store: nothing of
//     it is stored, and its error wraps ErrDiskFull and so syscall.ENOSPC.
//   - Reads, DeleteRange and snapshot reads always pass through.
//
// What the faults model, and what they do not:
//
//   - fsync-delay models a disk whose fsync is slow: raft's group commit
//     (one StoreLogs per batch) waits, so the leader's write latency and a
//     follower's append acknowledgements grow, and heartbeats sent by raft's
//     replication goroutines still flow. It does not slow reads, and the
//     delay is added before the write, not inside bolt's fsync, so a crash
//     during it loses nothing that a real slow fsync would have kept.
//   - disk-full models a disk with no room for new pages: appends and new
//     snapshot files fail. A real ENOSPC from bolt comes mid-transaction or
//     from fsync, where bolt rolls back in memory but the file may already
//     hold part of the write (even, after a failed fsync, the whole entry
//     after a restart); failing before the write is the clean case of
//     "nothing written". A real full disk also often lets small writes
//     through, because bolt reuses pages freed by log compaction; that is
//     why disk-full spares the stable store.
//   - disk-full-stable adds the disk with no free page at all. hashicorp/raft
//     panics when it cannot save a new term (setCurrentTerm), so a node
//     with it on crashes at its next term change (an election, or a new
//     leader's first message); a follower survives until then. A refused
//     vote (persistVote) is only logged.
//   - With disk-full on the leader, raft's dispatchLogs fails the batch's
//     futures with the store's error and steps down; the entries were never
//     replicated and are not applied. raft's LogCache quotes the store's
//     error (%q), so above it errors.Is(err, syscall.ENOSPC) no longer
//     holds; the text "no space left on device" remains. A follower with disk-full rejects
//     appends and the leader keeps retrying it, so a three-node cluster
//     keeps its quorum.
//   - CheckStorage reports ErrDiskFull while disk-full is on, so /readyz
//     fails as it would for a real full disk. Free-space numbers from
//     statfs are not faked.
package failpoint
