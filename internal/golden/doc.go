// Package golden gives tests the golden files of versioned formats: the
// bytes a format version wrote (Raft entries, snapshots, backups),
// committed once under a testdata directory.
//
// Rules it keeps:
//   - A golden file is never rewritten. -write-golden creates the files
//     that are missing and leaves every existing one alone: a version's
//     bytes are its contract with every node and data directory that
//     wrote them, so a change to what a format writes is a new version
//     with files of its own, and the old version's stay to prove they are
//     still read.
//   - Only tests import it.
package golden
