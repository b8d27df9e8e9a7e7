// Package cluster owns raft for a trustplane node: the log and stable
// store (raft-boltdb in <data-dir>/raft/raft.db behind a 512-entry cache),
// file snapshots (<data-dir>/raft/snapshots, two kept), the mutual-TLS
// stream layer every raft connection uses, bootstrapping, and the two
// operations the API is built on:
//
//   - Propose appends an fsm.Command and returns the fsm.Result once the
//     local FSM has applied it. The entry's log index is the object's
//     resourceVersion. Concurrent Proposes are group-committed (raft's
//     BatchApplyCh), so one fsync covers many writes.
//   - ReadIndex gives a linearizable read point: every write acknowledged
//     before the call is applied locally when it returns.
//
// Rules this package keeps:
//
//   - Every error wraps one of the sentinels in errors.go, so callers never
//     match raft's errors. ErrTimeout and ErrLeadershipLost from Propose
//     mean "outcome unknown", never "failed".
//   - Term barrier: a new leader proposes an fsm.OpNoop and serves no read
//     index until it has applied (see runBarrier for why). Losing
//     leadership clears read-readiness; a term identifies one leadership.
//   - ReadIndex rounds are shared but never reused: a caller joins the
//     first verification round that starts after it arrived.
//   - No wait outlives the node: Shutdown ends every Propose, ReadIndex and
//     WaitApplied with ErrShutdown, even where raft itself would leave a
//     future unanswered.
//   - Raft traffic is mutual TLS only. Both sides present the node
//     certificate (client and server usage) and require the peer's to
//     chain to the cluster CA; the dialler also checks the peer's name
//     (TLS.ServerName, or else the host of the peer's raft address).
//     Restricting peers to node identities, rather than any certificate
//     of the CA, is done by the caller's VerifyPeerCertificate hook.
//   - Raft's hclog output goes to the node's slog.Logger at Info and up.
//
// Not here yet (the HA work): discovery and BootstrapExpect > 1, voter
// management, and forwarding of writes and read indexes from followers to
// the leader; until then followers answer ErrNotLeader.
//
// This package imports only fsm from trustplane.
package cluster
