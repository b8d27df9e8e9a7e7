// Package check owns the checkers of a chaos run: given a history.History it
// decides whether what the clients and watchers saw is consistent with one
// linearizable, Raft-ordered log, and says which operations, nodes and
// resourceVersions are involved when it is not. It judges a recorded history
// only; it never talks to a server.
//
// The checkers, each a function returning a Result:
//   - Outcomes: no acknowledged write is lost, no failed write took effect,
//     and every read returned something the log holds.
//   - Linearizability: per ConfigMap key, the linearizable reads and the
//     writes are linearizable against a register with resourceVersions
//     (porcupine). On a violation it returns a Visual for porcupine's HTML.
//   - Watch: per node and resource, each watch stream is ordered, free of
//     duplicates and gaps, resumes where the previous session stopped, and
//     agrees with every other node about what happened at each RV.
//   - Convergence: after the run settled, every node holds the same
//     ConfigMaps and CSRs, and that state is the log's last word per key.
//   - CSRs: every CSR is signed at most once, approved CSRs are signed on
//     every node, unapproved ones never.
//   - Staleness: resourceVersion=0 reads are no older than the servers'
//     --max-stale-read bound (plus a slack for apply lag).
//
// The reference log. resourceVersion is the Raft log index, so one RV names
// at most one write. The reference log is the union of every ConfigMap
// watch event (by RV) and every node's final ConfigMaps; two sources that
// disagree about one RV are a Watch violation. A range of RVs is "covered"
// when some watch session of some node delivered up to its end from a start
// below it (a session promises every event in (StartRV, last delivered]);
// inside a covered range the reference log is complete, so a write missing
// there is lost, and an Unknown write missing there did not happen.
//
// Rules it keeps:
//   - A checker never guesses: what it cannot decide from the history is an
//     Info line (counted), never a violation and never silently OK.
//   - A Result with Skipped set is not OK: "could not check" (no CSR ops,
//     porcupine timed out) is reported as such.
//   - Violations are capped (MaxViolations kept, the rest counted in
//     Dropped), and each one names the op IDs, nodes and RVs it is about.
//   - Everything is O(n log n) in ops and events except porcupine's search,
//     which runs per key under one timeout.
//   - Local (resourceVersion=0) reads are never held to linearizability;
//     only Staleness and Outcomes look at them.
package check
