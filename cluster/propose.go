package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// Propose appends cmd to the raft log and waits until the local FSM has
// applied it, returning the FSM's Result. Result.Revision is the entry's
// log index, which becomes the object's resourceVersion.
//
// A failed precondition is not an error here: the entry still consumed an
// index, and Result.Err says which precondition failed. Errors mean the
// command may not have applied:
//
//   - ErrNotLeader: this node is not the leader; nothing was written and
//     the caller may forward to Leader().
//   - ErrNoLeader: no leader appeared within ApplyTimeout; nothing written.
//   - ErrNotApplied: definitely not applied (not queued in time, or
//     appended and then overwritten by a later leader); nothing written.
//   - ErrTimeout: ctx ended after the entry was handed to raft; the
//     outcome is unknown.
//   - ErrLeadershipLost: appended, then leadership was lost, and the
//     outcome could not be resolved within ApplyTimeout; outcome unknown.
//   - ErrShutdown: the node stopped.
//
// An entry appended before leadership was lost, or one the leader failed
// to persist (a log store error), is resolved before Propose returns
// (resolve): once this node has applied past its index, either
// the entry there is still this one, and its Result is returned as if
// nothing had happened, or it is another leader's, and the answer is
// ErrNotApplied. Callers thus hear a definite outcome whenever one can be
// known, and never retry a write that in fact committed.
//
// Concurrent Proposes are group-committed by raft (BatchApplyCh): entries
// queued while a disk write is in progress share the next one.
func (n *Node) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if cmd == nil {
		return nil, errors.New("cluster: nil command")
	}
	out, err := n.proposeEncoded(ctx, [][]byte{cmd.Encode()})
	if err != nil {
		return nil, err
	}
	return out[0].res, out[0].err
}

// proposeEncoded is Propose for encoded commands, all at once (the
// leader's half of Submit proposes a frame's with it): each entry's
// outcome, in order, or the one error that kept them all from raft
// (ErrShutdown, ErrNotLeader, ErrNoLeader, ErrTimeout).
func (n *Node) proposeEncoded(ctx context.Context, datas [][]byte) ([]proposed, error) {
	if n.ctx.Err() != nil {
		return nil, ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	timeout, err := n.enqueueWindow(ctx)
	if err != nil {
		return nil, err
	}
	return n.proposeAll(ctx, datas, timeout), nil
}

// enqueueWindow waits (bounded by ApplyTimeout) until this node leads, and
// returns how long raft may take to enqueue an entry: the rest of
// ApplyTimeout, or of ctx if that ends first. It fails as Propose does:
// ErrNotLeader, ErrNoLeader, or ErrTimeout when no time is left.
func (n *Node) enqueueWindow(ctx context.Context) (time.Duration, error) {
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	if err := n.awaitLeader(ctx, deadline); err != nil {
		return 0, err
	}
	timeout := time.Until(deadline)
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return 0, fmt.Errorf("%w: no time left to enqueue the entry", ErrTimeout)
	}
	return timeout, nil
}

// proposed is one entry's outcome, as Propose returns it.
type proposed struct {
	res *fsm.Result
	err error
}

// proposeAll hands every entry in datas to raft at once (raft
// group-commits them) and returns each one's outcome, by Propose's rules,
// in order. ctx must be bound (bind); timeout bounds the enqueueing.
// One goroutine waits for all the futures, in log order, as raft answers
// them.
func (n *Node) proposeAll(ctx context.Context, datas [][]byte, timeout time.Duration) []proposed {
	start := time.Now()
	futs := make([]raft.ApplyFuture, len(datas))
	for i, data := range datas {
		futs[i] = n.raft.Apply(data, timeout)
	}
	errs, answered := waitFutures(ctx, futs)
	out := make([]proposed, len(datas))
	for i, fut := range futs {
		if i >= answered {
			out[i].err = n.ctxErr(ctx)
			continue
		}
		out[i].res, out[i].err = n.outcome(ctx, fut, errs[i], datas[i], start)
	}
	return out
}

// outcome is what became of data, which raft answered with fut and err.
func (n *Node) outcome(ctx context.Context, fut raft.ApplyFuture, err error, data []byte, start time.Time) (*fsm.Result, error) {
	if errors.Is(err, raft.ErrLeadershipLost) {
		if idx := fut.Index(); idx != 0 {
			return n.resolve(ctx, idx, data)
		}
		// Never dispatched to the log: nothing was written.
		return nil, fmt.Errorf("%w: leadership was lost before the entry was appended: %w", ErrNotApplied, err)
	}
	if err != nil && fut.Index() != 0 && !knownRaftErr(err) {
		// The leader gave the entry an index and then failed to persist
		// it (a store error; raft steps down). Whether the entry reached
		// a disk is not for us to guess: the log decides, as after a lost
		// leadership, and an unreadable log leaves the outcome unknown.
		n.logger.Warn("the leader could not persist a write; resolving its outcome from the log", "index", fut.Index(), "error", err)
		return n.resolve(ctx, fut.Index(), data)
	}
	if err != nil {
		return nil, n.raftErr(err)
	}
	switch resp := fut.Response().(type) {
	case *fsm.Result:
		n.metrics.apply.Observe(time.Since(start).Seconds())
		return resp, nil
	case error:
		return nil, fmt.Errorf("cluster: fsm rejected entry %d: %w", fut.Index(), resp)
	default:
		return nil, fmt.Errorf("cluster: fsm returned %T for entry %d, want *fsm.Result", resp, fut.Index())
	}
}

// awaitLeader returns nil once this node is the leader, ErrNotLeader as
// soon as another node is known to be, and ErrNoLeader if neither happens
// by deadline. Waiting covers the election right after start-up or a
// leader failure, so callers need not retry that window themselves.
func (n *Node) awaitLeader(ctx context.Context, deadline time.Time) error {
	addr, id, err := n.awaitLeaderAddr(ctx, deadline)
	if err != nil {
		return err
	}
	if addr != "" {
		return fmt.Errorf("%w: leader is %s at %s", ErrNotLeader, id, addr)
	}
	return nil
}

// knownRaftErr reports whether err is one of raft's own answers, which
// raftErr translates; anything else came from below raft (the log store).
func knownRaftErr(err error) bool {
	for _, known := range []error{raft.ErrNotLeader, raft.ErrLeadershipLost, raft.ErrLeadershipTransferInProgress,
		raft.ErrEnqueueTimeout, raft.ErrRaftShutdown, raft.ErrAbortedByRestore} {
		if errors.Is(err, known) {
			return true
		}
	}
	return false
}

// raftErr translates raft's errors into this package's sentinels, keeping
// raft's error in the chain.
func (n *Node) raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		if addr, id := n.raft.LeaderWithID(); id != "" {
			return fmt.Errorf("%w: leader is %s at %s: %w", ErrNotLeader, id, addr, err)
		}
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrNotApplied, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrShutdown, err)
	default:
		return fmt.Errorf("cluster: raft: %w", err)
	}
}

// watchLeadership follows raft's leadership signal. On becoming leader it
// starts the term barrier; on losing leadership it drops read-readiness
// and stops the barrier. Leader observations from other nodes only wake
// waiters.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	stopBarrier := func() {}
	defer func() { stopBarrier() }()
	for {
		select {
		case isLeader := <-n.raft.LeaderCh():
			stopBarrier()
			n.readyTerm.Store(0)
			if isLeader {
				ctx, cancel := context.WithCancel(n.ctx)
				stopBarrier = cancel
				n.wg.Add(1)
				go n.runBarrier(ctx)
				n.logger.Info("became raft leader", "term", n.raft.CurrentTerm())
			} else {
				stopBarrier = func() {}
				n.logger.Info("lost raft leadership")
			}
			n.broadcast()
		case <-n.obsCh:
			n.broadcast()
		case <-n.ctx.Done():
			return
		}
	}
}

// runBarrier proposes an OpNoop in the new term and, once it has applied
// locally, marks the term read-ready.
//
// Why: raft commits a LogNoop at the start of each term but never hands it
// to the FSM, so until one of our own commands applies, the FSM's applied
// index can sit below raft's CommitIndex and a read index taken from
// CommitIndex could never be reached by WaitApplied. Also, a new leader's
// commit index may lag the previous leader's until an entry of its own term
// commits. After our OpNoop has applied, both problems are gone for the
// rest of the term: CommitIndex covers every earlier acknowledged write and
// every later committed entry is one the FSM sees.
func (n *Node) runBarrier(ctx context.Context) {
	defer n.wg.Done()
	term := n.raft.CurrentTerm()
	data := (&fsm.Command{Op: fsm.OpNoop}).Encode()
	backoff := 10 * time.Millisecond
	for {
		fut := n.raft.Apply(data, n.cfg.ApplyTimeout)
		answered, err := waitFuture(ctx, fut)
		if !answered {
			return
		}
		if err == nil {
			if n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term {
				n.readyTerm.Store(term)
				n.broadcast()
				n.logger.Info("term barrier applied; serving linearizable reads", "term", term, "index", fut.Index())
			}
			return
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		n.logger.Warn("term barrier failed; retrying", "term", term, "error", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// readReady reports whether this node leads and has applied its current
// term's barrier. A term identifies one leadership (winning again needs a
// new election, hence a new term), so the comparison cannot confuse two
// leaderships.
func (n *Node) readReady() bool {
	term := n.readyTerm.Load()
	return term != 0 && n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term
}

// resolve finds out what became of data, appended at index by this node
// as leader before it lost leadership. It waits (bounded by ApplyTimeout
// and ctx) until this node has applied index: the entry there is then
// committed for good. If it is still ours, the FSM's result for it is the
// answer; if another leader's entry replaced it, ours was never applied.
// Only when the wait runs out, or the log no longer holds the index (a
// snapshot replaced it), is the outcome unknown.
//
// The entry is recognised by its bytes. Commands carry the uids,
// resourceVersion preconditions and timestamps the leader stamped, so two
// different writes do not encode alike.
func (n *Node) resolve(ctx context.Context, index uint64, data []byte) (*fsm.Result, error) {
	rctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if err := n.fsm.WaitApplied(rctx, index); err != nil {
		return nil, fmt.Errorf("%w: entry %d was not resolved in time: %w", ErrLeadershipLost, index, err)
	}
	var l raft.Log
	if err := n.logs.GetLog(index, &l); err != nil {
		return nil, fmt.Errorf("%w: entry %d is no longer in the log: %w", ErrLeadershipLost, index, err)
	}
	if l.Type != raft.LogCommand || !bytes.Equal(l.Data, data) {
		n.logger.Info("a write appended before leadership was lost was overwritten by the next leader", "index", index)
		return nil, fmt.Errorf("%w: entry %d was replaced by a later leader's", ErrNotApplied, index)
	}
	res := n.fsm.ResultAt(index)
	if res == nil {
		return nil, fmt.Errorf("%w: entry %d committed but its result is no longer known", ErrLeadershipLost, index)
	}
	n.logger.Info("a write appended before leadership was lost committed; answering its result", "index", index)
	return res, nil
}
