// Package cluster owns raft for a trustplane node: the log and stable
// store (raft-wal in <data-dir>/raft/wal behind a 512-entry cache, the
// directory locked by <data-dir>/raft/LOCK; a raft.db of the raft-boltdb
// era is migrated on start, logstore.go; segments written with zeros
// ahead of the log so an append's fsync flushes data, not extent changes,
// walfs.go),
// file snapshots (<data-dir>/raft/snapshots, two kept), the mutual-TLS
// stream layer every raft connection uses, discovery and membership
// (memberlist gossip, bootstrap-expect, voter management, graceful leave),
// a small internal RPC between nodes, and the two operations the API is
// built on:
//
//   - Propose appends an fsm.Command and returns the fsm.Result once the
//     local FSM has applied it. The entry's log index is the object's
//     resourceVersion. Concurrent Proposes are group-committed (raft's
//     BatchApplyCh), so one fsync covers many writes. Only the leader
//     proposes; followers get ErrNotLeader.
//   - Submit does what Propose does from any node: a follower or replica
//     sends the command it built to the leader over the internal RPC,
//     which proposes it, and answers once it has applied the entry
//     itself (submit.go). It is how writes run where they arrive
//     (--execute-writes=local); with the default, the API forwards a
//     follower's HTTP write to LeaderAPIAddr instead.
//   - ReadIndex gives a linearizable read point on any node: every write
//     acknowledged before the call is applied locally when it returns. A
//     follower gets the index from the leader over the internal RPC.
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
//     first verification round that starts after it arrived. Followers
//     share their remote rounds by the same rule.
//   - A node that cannot get a read index confirmed by the leader fails
//     (ErrNoLeader or ErrTimeout); it never serves a linearizable read on
//     its own authority.
//   - No wait outlives the node: Shutdown ends every Propose, ReadIndex and
//     WaitApplied, and the membership loops' configuration changes
//     (awaitChange), with ErrShutdown, even where raft itself would leave a
//     future unanswered, and closes the internal-RPC connections it
//     accepted, so no caller keeps talking to a stopped node.
//   - Raft traffic is mutual TLS only. Both sides present the node
//     certificate (client and server usage) and require the peer's to
//     chain to the CA pool in Config.TLS, which is the node CA alone (no
//     signer uses it); the dialler also checks the peer's name
//     (TLS.ServerName, or else the host of the peer's raft address).
//     Restricting peers to node identities is done by the caller's
//     VerifyConnection hook. The internal RPC shares the raft port and
//     its TLS (rpc.go).
//   - A follower that refuses a pipelined append is replicated to one
//     append at a time until it has caught up: raft's network transport
//     is only used through pipelineTransport, whose pipeline stops at the
//     first refusal, since raft v1.7.3's own can wedge there for good
//     (pipeline.go).
//   - Over the internal RPC a node may have the leader propose only puts
//     and deletes of API objects (submittable): internal records are
//     written by their leader-only writers alone. Concurrent proposals to
//     one leader share frames, each command answered on its own. A
//     proposal whose frame was sent and got no answer is an unknown
//     outcome (ErrTimeout), never retried; one the leader could not take
//     is sent again.
//   - A node writes a format's newer version only once every member of
//     the raft configuration, voter or replica, reads it (the cluster
//     version, formats.go): each node reports what its build reads in
//     the stats RPC, one that reports nothing or does not answer counts
//     as reading version 1, and no peer raises a format above this
//     build's own. A peer that refuses a newer frame has acted on none of
//     it, and the frame goes again in the older version.
//   - Over the internal RPC a node may remove only itself (Leave): the
//     caller's name comes from its certificate (Config.PeerName), never
//     from the request. Removing another member is done by the leader
//     alone, on an operator's request to its API.
//   - At most MaxPendingHandshakes accepted raft-port connections are in
//     their handshake at once, each for at most HandshakeTimeout and with
//     FirstByteTimeout to send its ClientHello; a full table closes its
//     oldest, never the newest, and one address holds at most an eighth
//     of it (package connlimit), so idle or half-open connections can
//     neither exhaust the node nor keep a peer from reconnecting.
//   - Inbound gossip streams are bounded the same way (MaxGossipStreams),
//     and one that is not encrypted, carries another cluster's label, or
//     declares more than maxGossipStreamBytes is refused before memberlist
//     reads or allocates anything for it (gossiptransport.go). The gossip
//     label is added and checked there, not by memberlist, so that it can
//     be introduced in a rolling upgrade (GossipLabelMode).
//   - MVCC history is bounded by age and by bytes, and only through the
//     log: the leader's compactor proposes OpCompact (compact.go); no node
//     drops history on its own.
//   - Membership never costs the quorum (membership.go: reconcile and
//     autopilot; removal.go: RemoveMember and Leave). A voter counts as
//     alive when the leader's raft reaches it (heartbeat observations,
//     contact.go) and gossip does not report it failed or left; no removal
//     (RemoveMember, Leave, a member that left, autopilot) proceeds unless
//     the alive voters left are a majority of the remaining configuration.
//     Leave is never forced: refused, the node stays a voter and stops
//     gossip without a leave message. Autopilot (DeadServerTimeout) also
//     needs raft to have lost the voter: gossip silence alone removes no one.
//   - RemoveMember is durable (removed.go): a marker in the internal key
//     space (fsm.SpaceInternal), written through the log before the
//     removal, keeps every later leader from re-adding the name, even
//     restarted with the same data dir. The leader reconciles only after
//     its term barrier, so it has applied every marker. The marker is
//     cleared only when the name comes back with no raft state (an emptied
//     data dir). Leave writes none.
//   - A voter that lost its log does not keep its vote (datadir.go):
//     every data directory has a random identity, which the leader records
//     through the log for each voter and checks every reconcile. A voter
//     that comes back with another one (a lost PVC, a wiped disk) is
//     demoted to non-voter, under the quorum rule of removals, until it
//     has applied everything the leader had logged when it noticed; then
//     its new identity is recorded and it is a voter again. Every
//     non-voter is promoted by that rule.
//   - A node not in the configuration (its own latest one, or the
//     leader's, asked over the RPC when no leader has contacted it for a
//     while: configcheck.go) fails CheckMember; the API then refuses its
//     resourceVersion=0 reads and watches, which would be stale without
//     bound.
//   - Gossip is encrypted with the shared key and only informs: raft's
//     configuration decides who votes, and only the leader changes it
//     (membership.go). Peers of another cluster (ClusterID), with another
//     key, reusing a live member's name or another server's raft address,
//     or carrying raft state of another cluster are refused with a log
//     line saying why. A member dead for gossipDeadNodeReclaim may come
//     back from a new gossip address (a pod's new IP). A server that comes
//     back at a new raft address is moved there (moveServer) only when
//     raft no longer reaches the old one and the node at the new one
//     answers with the server's name, raft state of this cluster and the
//     recorded data directory; one with no raft state is refused.
//     Joining means reaching another member: a seed that names this node
//     (its own DNS name) does not count, and a node that knows no peer
//     keeps retrying its seeds.
//   - Status (status.go) is this node's own raft view and never blocks.
//     Its leader-change and election counts come from an observer whose
//     filter raft calls synchronously for every observation, so none is
//     lost to a full channel, and it takes LeaderCh from no one.
//   - Backups (backup.go): Export serves a copy of the state only after a
//     read index confirmed by the leader, so it holds every acknowledged
//     write, on any node. SeedDataDir writes a copy into an empty data
//     directory as a one-voter cluster (a snapshot at the copy's index and
//     term, CurrentTerm = that term, an empty log), so objects keep their
//     resourceVersions and new writes get larger ones; it refuses a data
//     directory with any raft state, builds in a temporary folder renamed
//     into place, and drops the removal markers, which belong to the old
//     cluster's configuration.
//   - Bootstrap happens at most once: BootstrapExpect 1 on the first
//     start, or bootstrap-expect's identical server list on every node
//     that sees the same servers (bootstrapLoop, bootstrap.go).
//   - Metrics (metrics.go: Collector) are this node's own, read from
//     Status and raft when scraped; the apply, log-append and snapshot
//     histograms are per Node, recorded by wrappers that change nothing
//     else of the stores they time (IsMonotonic included).
//   - Raft's hclog and memberlist's log output go to the node's
//     slog.Logger at Info and up.
//   - Outbound raft, RPC and gossip TCP connections start from the bind
//     IP (RaftAddr's, GossipAddr's host) when that is a specific IP of the
//     destination's class (loopback for loopback, non-loopback for
//     non-loopback); otherwise the kernel chooses. The rule is dialsrc's
//     alone. Gossip UDP is sent from the bound socket anyway.
//
// This package imports only fsm, dialsrc and internal/failpoint from
// trustplane; the failpoints exist only in a -tags failpoints build.
package cluster
