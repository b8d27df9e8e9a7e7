package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// Submit replicates cmd from any node, voter or replica, and returns the
// fsm's result once the entry has committed. The leader proposes it
// itself (Propose). Any other node sends the encoded command to the leader
// over the internal RPC (opPropose); the leader proposes it exactly as its
// own, and answers the entry's index and the fsm's verdict on its
// preconditions. The sender waits until its own fsm has applied that
// index only when a precondition failed, so that the caller's retry reads
// a state at least as new as the one the leader judged by (proposeAt).
//
// Outcomes are those of Propose, across the RPC:
//
//   - an answer the leader could not have acted on (another node leads, no
//     leader, the entry definitely not applied) or a leader that could
//     not be reached at all is tried again, with whoever leads, until
//     ApplyTimeout: nothing was written;
//   - the leader's outcome-unknown answers (ErrTimeout, ErrLeadershipLost,
//     ErrShutdown) are returned as they are;
//   - a request that was sent and got no answer (the leader died or was
//     cut off mid-call) is ErrTimeout: it may have been appended, and
//     this node cannot learn which from a leader it cannot reach.
//
// Only API objects may be submitted (submittable): internal records are
// written by the leader alone, which is what reads them.
func (n *Node) Submit(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if cmd == nil {
		return nil, errors.New("cluster: nil command")
	}
	if n.dialRPC == nil {
		return n.Propose(ctx, cmd)
	}
	if err := submittable(cmd); err != nil {
		return nil, err
	}
	if n.ctx.Err() != nil {
		return nil, ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	var data []byte
	var lastErr error
	for {
		addr, err := n.awaitLeaderAddr(ctx, deadline)
		if err != nil {
			return nil, notSubmitted(err, lastErr)
		}
		if addr == "" {
			res, err := n.Propose(ctx, cmd)
			if !errors.Is(err, ErrNotLeader) {
				return res, err
			}
			lastErr = err // leadership moved before the entry was queued
		} else {
			if data == nil {
				data = cmd.Encode()
			}
			res, sent, err := n.proposeAt(ctx, addr, data)
			switch {
			case err == nil:
				n.metrics.submitted.WithLabelValues("applied").Inc()
				return res, nil
			case sent && !nothingWritten(err):
				n.metrics.submitted.WithLabelValues("unknown").Inc()
				return nil, err
			}
			n.metrics.submitted.WithLabelValues("retried").Inc()
			lastErr = err
		}
		if time.Now().After(deadline) {
			return nil, notSubmitted(ErrNoLeader, lastErr)
		}
		select {
		case <-time.After(remoteRetryDelay):
		case <-ctx.Done():
			return nil, notSubmitted(n.ctxErr(ctx), lastErr)
		}
	}
}

// notSubmitted is Submit's answer when no attempt can have been applied:
// ErrNoLeader (nothing written; the caller may send the write again),
// or ErrShutdown, never the ErrTimeout that would call the outcome
// unknown. err is why Submit stopped, last the last attempt's failure.
func notSubmitted(err, last error) error {
	if errors.Is(err, ErrShutdown) {
		return err
	}
	// %v, not %w: the chain must not hold ErrTimeout or a context
	// error, which callers read as an unknown outcome.
	if last != nil {
		return fmt.Errorf("%w: %v (last attempt: %v)", ErrNoLeader, err, last)
	}
	if errors.Is(err, ErrNoLeader) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrNoLeader, err)
}

// submittable is the rule for what a node may have the leader propose on
// its behalf: puts and deletes of API objects (built-in and custom key
// spaces). Internal records (signing keys, keyrings, membership markers),
// compactions and no-ops are the leader's own to write: their writers run
// on the leader and read the leader's state. The leader checks it again
// for every command it receives.
func submittable(cmd *fsm.Command) error {
	if cmd.Op != fsm.OpPut && cmd.Op != fsm.OpDelete {
		return fmt.Errorf("%w: a node may submit only puts and deletes, not %s", ErrNotPermitted, cmd.Op)
	}
	if cmd.Key.Space == fsm.SpaceInternal {
		return fmt.Errorf("%w: a node may not submit a write of an internal record", ErrNotPermitted)
	}
	if err := cmd.Key.Valid(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotPermitted, err)
	}
	return nil
}

// nothingWritten reports whether an error from the leader says the command
// was not and will not be applied, so it may be sent again.
func nothingWritten(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotApplied) ||
		errors.Is(err, ErrNotReadReady)
}

// awaitLeaderAddr waits until a leader is known: "" when this node leads,
// else the leader's raft address. It fails with ErrNoLeader at deadline.
func (n *Node) awaitLeaderAddr(ctx context.Context, deadline time.Time) (raft.ServerAddress, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := n.changed()
		if n.raft.State() == raft.Leader {
			return "", nil
		}
		if addr, id := n.raft.LeaderWithID(); id != "" && id != raft.ServerID(n.cfg.NodeName) {
			return addr, nil
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-ch:
		case <-timer.C:
			return "", ErrNoLeader
		case <-ctx.Done():
			return "", n.ctxErr(ctx)
		}
	}
}

// proposeAt has the leader at addr propose data and waits until this node
// has applied the entry. sent is false when the request cannot have
// reached the leader (no connection could be made). The request is never
// sent twice: unlike the idempotent operations of call, a proposal that
// met a closed pooled connection may have been read.
func (n *Node) proposeAt(ctx context.Context, addr raft.ServerAddress, data []byte) (res *fsm.Result, sent bool, err error) {
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > n.cfg.ApplyTimeout {
		deadline = time.Now().Add(n.cfg.ApplyTimeout)
	}
	req := rpcRequest{Op: opPropose, Command: data, TimeoutMS: max(time.Until(deadline).Milliseconds(), 1)}
	conn, _, err := n.rpcConn(ctx, addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, n.ctxErr(ctx)
		}
		return nil, false, fmt.Errorf("cluster: reaching the leader at %s: %w", addr, err)
	}
	resp, err := n.roundTrip(ctx, conn, deadline, addr, req)
	if errors.Is(err, errUnsent) {
		_ = conn.Close()
		return nil, false, fmt.Errorf("cluster: sending a proposal to the leader at %s: %w", addr, err)
	}
	if err != nil {
		_ = conn.Close()
		return nil, true, fmt.Errorf("%w: the leader at %s did not answer a proposal; it may or may not have been applied: %w", ErrTimeout, addr, err)
	}
	n.rpcPool.put(addr, conn)
	if _, err := n.remoteErr(resp, addr, req); err != nil {
		return nil, true, err
	}
	if resp.Index == 0 {
		return nil, true, fmt.Errorf("%w: the leader at %s answered a proposal without an index", ErrTimeout, addr)
	}
	verdict, err := resultErr(resp.Result)
	if err != nil {
		return nil, true, fmt.Errorf("%w: the leader at %s: %w", ErrTimeout, addr, err)
	}
	// The entry is committed, and the leader's verdict is the answer. A
	// write that applied is answered at once: this node learns the commit
	// with the leader's next append, up to raft's CommitTimeout later,
	// and its resourceVersion=0 reads may be stale by that much, as they
	// may be for any other node's write. A failed precondition waits
	// until this node has applied the entry, so the caller's retry reads
	// a state at least as new as the one the leader judged by (and the
	// result names the current version, Prev); should the wait end first,
	// the verdict stands alone.
	if verdict == nil {
		if local := n.fsm.ResultAt(resp.Index); local != nil {
			return local, true, nil
		}
		return &fsm.Result{Revision: resp.Index}, true, nil
	}
	if werr := n.fsm.WaitApplied(ctx, resp.Index); werr == nil {
		if local := n.fsm.ResultAt(resp.Index); local != nil {
			return local, true, nil
		}
	}
	return &fsm.Result{Revision: resp.Index, Err: verdict}, true, nil
}

// serveProposal is the leader's half of Submit: it proposes a command a
// node sent, if caller proved a node identity and the command is one a
// node may submit.
func (n *Node) serveProposal(ctx context.Context, data []byte, caller string, callerErr error) (rpcResponse, error) {
	if callerErr != nil {
		return rpcResponse{}, fmt.Errorf("%w: %v", ErrNotPermitted, callerErr)
	}
	cmd, err := fsm.DecodeCommand(data)
	if err != nil {
		return rpcResponse{}, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if err := submittable(cmd); err != nil {
		n.logger.Warn("internal RPC: refused a proposal", "caller", caller, "error", err)
		return rpcResponse{}, err
	}
	n.metrics.received.Inc()
	if h := n.proposeHook.Load(); h != nil {
		(*h)()
	}
	res, err := n.Propose(ctx, cmd)
	if err != nil {
		return rpcResponse{}, err
	}
	return rpcResponse{Index: res.Revision, Result: verdictCode(res.Err)}, nil
}

// verdicts carry the fsm's precondition errors across the wire.
var verdicts = []struct {
	code string
	err  error
}{
	{"exists", fsm.ErrExists},
	{"not_found", fsm.ErrNotFound},
	{"mod_revision", fsm.ErrModRevisionMismatch},
	{"uid_mismatch", fsm.ErrUIDMismatch},
}

func verdictCode(err error) string {
	if err == nil {
		return ""
	}
	for _, v := range verdicts {
		if errors.Is(err, v.err) {
			return v.code
		}
	}
	return "other:" + err.Error()
}

func resultErr(code string) (error, error) {
	if code == "" {
		return nil, nil
	}
	for _, v := range verdicts {
		if v.code == code {
			return v.err, nil
		}
	}
	return nil, fmt.Errorf("unknown verdict %q", code)
}
