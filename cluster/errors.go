package cluster

import "errors"

// Sentinel errors. Every error the Node returns wraps one of them (with %w,
// together with the underlying raft or context error), so callers decide
// with errors.Is and never by matching raft's own errors.
var (
	// ErrNotLeader: the request needs the leader and this node is not it.
	// Nothing was written. The caller may send the request to Leader().
	ErrNotLeader = errors.New("cluster: not the leader")

	// ErrNoLeader: no leader is known (an election is in progress or there
	// is no quorum) and none appeared within the wait. Nothing was written;
	// the request may be retried later.
	ErrNoLeader = errors.New("cluster: no known leader")

	// ErrTimeout: the context ended or ApplyTimeout passed first. For
	// Propose the outcome is unknown: the entry may still commit and apply.
	ErrTimeout = errors.New("cluster: timed out")

	// ErrLeadershipLost: this node was leader when it appended the entry but
	// lost leadership before the entry committed, and could not find out
	// in time whether it committed. The outcome is unknown, exactly as with
	// ErrTimeout; the caller must not assume it failed.
	ErrLeadershipLost = errors.New("cluster: leadership lost while committing")

	// ErrNotApplied: the entry was definitely not applied and never will
	// be: raft refused to queue it in time, or it was appended and then
	// overwritten by a later leader's log. Nothing was written; sending
	// the command again is safe.
	ErrNotApplied = errors.New("cluster: the entry was not applied")

	// ErrUnsupportedVersion: a peer sent an internal RPC request of a
	// version this node does not read (RPCVersion): it runs a newer build.
	// Nothing was done.
	ErrUnsupportedVersion = errors.New("cluster: unsupported internal RPC version")

	// ErrShutdown: the node has been shut down.
	ErrShutdown = errors.New("cluster: node is shut down")

	// ErrNotReadReady: this node is leader but its term barrier has not
	// applied yet, so it cannot yet serve a linearizable read index.
	ErrNotReadReady = errors.New("cluster: leader has not applied its term barrier")

	// ErrBehind: the local FSM lags raft's commit index by more than
	// caughtUpSlack entries.
	ErrBehind = errors.New("cluster: local state is behind the log")
	// ErrStorage: the data directory cannot take writes (not writable, or
	// nearly full).
	ErrStorage = errors.New("cluster: storage is not writable")

	// ErrInvalidConfig: Config.Validate found a problem.
	ErrInvalidConfig = errors.New("cluster: invalid config")
)

// Sentinel errors of membership management.
var (
	// ErrUnknownMember: no server or gossip member has the given name.
	ErrUnknownMember = errors.New("cluster: unknown member")

	// ErrWouldLoseQuorum: removing the member would leave fewer alive
	// voters than a majority of the remaining configuration.
	ErrWouldLoseQuorum = errors.New("cluster: removal would leave no quorum of alive voters")

	// ErrNotPermitted: the internal RPC refused what a node may not ask
	// for: a removal of a node other than the caller (a node may only
	// remove itself, Leave; removing another member is the leader's
	// decision on an operator's request through its API, so a stolen or
	// misused node identity cannot strip the cluster of voters), or a
	// proposal of anything but an API object (submittable).
	ErrNotPermitted = errors.New("cluster: not permitted over the internal RPC")

	// ErrNotMember: this node is not in the cluster's configuration (not
	// yet added, removed, or the leader reports a configuration without
	// it). Its local state may be arbitrarily stale, so it serves no
	// resourceVersion=0 reads or watches and is not ready (CheckMember).
	ErrNotMember = errors.New("cluster: this node is not in the cluster's configuration")
)
