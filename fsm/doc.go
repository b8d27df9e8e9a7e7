// Package fsm is trustplane's replicated state machine: the versioned
// command encoding, the in-memory MVCC store that Raft's log is applied to,
// snapshot and restore, the applied-event stream, and waiters for the
// applied index. The Raft log index that applies a write is the written
// object's resourceVersion, so revisions have gaps and are never dense.
//
// It imports nothing of trustplane's, and it keeps these rules:
//
//   - Determinism. The same log gives the same state, the same Results and
//     byte-identical snapshots on every node: no clocks, no randomness, no
//     map iteration into output, no goroutines racing Apply. Everything
//     non-deterministic (uids, names, timestamps) is stamped into a Command
//     by the leader before it is proposed.
//
//   - Dumb compare-and-swap. A command is a put or delete with optional
//     preconditions (must-not-exist, mod revision, uid), a compaction or a
//     no-op. A failed precondition changes nothing and emits nothing, but
//     still consumes its log index. Kubernetes semantics live in api.
//
//   - Disjoint key spaces (keyspace.go). Every Key is in one Space:
//     built-in objects, custom resources or internal records. Two keys of
//     different spaces are different keys whatever their group, resource
//     and name, and a Prefix never reaches past its space. The space is
//     written in the group field (untagged for built-ins, "custom/<group>"
//     for custom resources, "trustplane.internal" for internal records), so
//     the command and snapshot formats are those of every earlier build;
//     an untagged key whose resource Config.Builtin does not know is a
//     custom object an earlier build wrote, and moves to SpaceCustom when it
//     is applied or restored. Which space a key is in is the storage
//     layer's choice (api/storage), never a request's.
//
//   - Panic on an undecodable command. A node that cannot apply the log
//     exactly as its peers do must stop, never diverge. An entry or a
//     snapshot of a version this build does not read is refused with both
//     versions named (CommandVersion, SnapshotVersion).
//
//   - Formats are frozen per version. testdata/command-v1 and
//     snapshot-v1.bin are what version 1 wrote, committed once and never
//     rewritten (golden_test.go, internal/golden): each build must read
//     them and write the same bytes. A change to either format is a new
//     version with golden files of its own, and the old version's stay.
//
//   - Published KVs are immutable. Every write builds a new history slice
//     and a new KV; nothing reachable from the tree is modified in place. So
//     readers hold KVs without locks or copies, and a Snapshot is an O(1)
//     copy-on-write clone of the tree that Persist serialises while Apply
//     continues.
//
//   - ResultAt remembers the results of the last few thousand commands, so
//     that a proposer who lost leadership can answer what its entry did.
//     It is not state: never snapshotted, never read by apply.
//
//   - History is dropped only by OpCompact, from the log. HistoryBytes and
//     CompactTargetForBytes let the leader's compactor bound history in
//     bytes; they read, they never drop.
//
//   - Backups use the snapshot path. Export is the same O(1) clone a raft
//     snapshot takes, and writes the same format; ReadExport verifies bytes
//     as Restore does. Export.WriteTo may leave out whole keys (a caller's
//     choice, e.g. cluster-specific keys on restore), never parts of a
//     key's history, so its output is still a state some FSM could have
//     reached. The backup file around it is fsm/backup's.
//
//   - Listeners never block. They run synchronously on the apply path, in
//     log order, after the change is visible to readers; a slow listener
//     would stall Raft, so listeners queue their work. WaitApplied callers
//     are released only after listeners have seen the index.
package fsm
