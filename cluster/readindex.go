package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// readRound is one leadership verification shared by every ReadIndex
// caller that joined it. index and err are written before done is closed.
type readRound struct {
	done  chan struct{}
	index uint64
	err   error
}

// ReadIndex returns an index such that every write acknowledged before the
// call started is at or below it, after waiting until the local FSM has
// applied it; a read served from local state afterwards is linearizable.
//
// It works only on the leader (followers get ErrNotLeader and forward) and
// only once the term barrier has applied; a new leader makes callers wait
// for that, up to ApplyTimeout. The steps are: capture raft's commit index,
// confirm leadership with a heartbeat round (VerifyLeader), then wait for
// the FSM. Confirmation is what makes the captured index safe: had another
// leader been elected meanwhile, the heartbeat round would fail.
//
// Callers share confirmation rounds: one goroutine runs them back to back,
// and a caller joins the first round that starts after it arrived, never
// one already in progress, whose captured commit index could predate a
// write acknowledged just before the caller arrived. So N concurrent reads
// cost about two heartbeat rounds, not N.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if n.ctx.Err() != nil {
		return 0, ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()

	if err := n.awaitReadReady(ctx, time.Now().Add(n.cfg.ApplyTimeout)); err != nil {
		return 0, err
	}
	r := n.joinRound()
	select {
	case <-r.done:
	case <-ctx.Done():
		return 0, n.ctxErr(ctx)
	}
	if r.err != nil {
		return 0, r.err
	}
	if err := n.fsm.WaitApplied(ctx, r.index); err != nil {
		return 0, n.ctxErr(ctx)
	}
	return r.index, nil
}

// awaitReadReady waits until this node is leader with its barrier applied.
// It fails fast with ErrNotLeader when another node leads, and waits while
// an election or this node's barrier is in progress.
func (n *Node) awaitReadReady(ctx context.Context, deadline time.Time) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := n.changed()
		if n.readReady() {
			return nil
		}
		if n.raft.State() != raft.Leader {
			if addr, id := n.raft.LeaderWithID(); id != "" && id != raft.ServerID(n.cfg.NodeName) {
				return fmt.Errorf("%w: leader is %s at %s", ErrNotLeader, id, addr)
			}
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-ch:
		case <-timer.C:
			if n.raft.State() == raft.Leader {
				return fmt.Errorf("%w: %w", ErrTimeout, ErrNotReadReady)
			}
			return ErrNoLeader
		case <-ctx.Done():
			return n.ctxErr(ctx)
		}
	}
}

// joinRound returns the round that has not started yet, creating it (and
// waking the round loop) if there is none.
func (n *Node) joinRound() *readRound {
	n.readMu.Lock()
	defer n.readMu.Unlock()
	n.joins.Add(1)
	if n.pending == nil {
		n.pending = &readRound{done: make(chan struct{})}
		select {
		case n.readKick <- struct{}{}:
		default: // a kick is already queued; it will pick this round up
		}
	}
	return n.pending
}

// runReadRounds runs one round at a time. Taking the pending round out of
// n.pending is the moment it starts: later callers create a new one.
func (n *Node) runReadRounds() {
	defer n.wg.Done()
	for {
		select {
		case <-n.readKick:
		case <-n.ctx.Done():
			n.readMu.Lock()
			r := n.pending
			n.pending = nil
			n.readMu.Unlock()
			if r != nil {
				r.err = ErrShutdown
				close(r.done)
			}
			return
		}
		n.readMu.Lock()
		r := n.pending
		n.pending = nil
		n.readMu.Unlock()
		if r == nil {
			continue
		}
		n.rounds.Add(1)
		r.index, r.err = n.verifyRound()
		close(r.done)
	}
}

// verifyRound captures the commit index and confirms leadership. The term
// is compared before and after: if it changed, leadership may have passed
// through another node in between and the captured index proves nothing.
func (n *Node) verifyRound() (uint64, error) {
	term := n.readyTerm.Load()
	if !n.readReady() {
		if n.raft.State() != raft.Leader {
			return 0, n.raftErr(raft.ErrNotLeader)
		}
		return 0, ErrNotReadReady
	}
	index := n.raft.CommitIndex()
	if h := n.roundHook.Load(); h != nil {
		(*h)()
	}
	answered, err := waitFuture(n.ctx, n.raft.VerifyLeader())
	if !answered {
		return 0, ErrShutdown
	}
	if err != nil {
		if errors.Is(err, raft.ErrLeadershipLost) {
			// For a read nothing was written, so this is plain "not leader".
			err = fmt.Errorf("%w: %w", raft.ErrNotLeader, err)
		}
		return 0, n.raftErr(err)
	}
	if n.raft.CurrentTerm() != term || n.raft.State() != raft.Leader {
		return 0, fmt.Errorf("%w: leadership changed during read index", ErrNotLeader)
	}
	return index, nil
}
