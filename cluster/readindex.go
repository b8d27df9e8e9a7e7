package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
// On the leader, once its term barrier has applied (a new leader makes
// callers wait for that, up to ApplyTimeout), the steps are: capture
// raft's commit index, confirm leadership with a heartbeat round
// (VerifyLeader), then wait for the FSM. Confirmation is what makes the
// captured index safe: had another leader been elected meanwhile, the
// heartbeat round would fail.
//
// On a follower (when the internal RPC is available) the node asks the
// leader for its read index, which the leader computes exactly as above,
// and then waits until its own FSM has applied it. A follower that cannot
// reach a leader that confirms its leadership keeps trying until
// ApplyTimeout or ctx ends and then fails with ErrNoLeader or ErrTimeout:
// it never answers with an index it could not confirm. Without the
// internal RPC (in-memory tests) followers answer ErrNotLeader.
//
// Callers share confirmation rounds, on the leader and on followers alike:
// a caller joins the first round that starts after it arrived, never one
// already in progress, whose captured commit index could predate a write
// acknowledged just before the caller arrived. Up to maxRoundsInFlight
// rounds overlap, so a caller waits for about one round rather than for the
// rest of a running round and then a whole new one; N concurrent reads still
// cost a few rounds, not N.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if n.ctx.Err() != nil {
		return 0, ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()

	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	var lastErr error
	for {
		leaderAddr, err := n.awaitReadReady(ctx, deadline, n.dialRPC != nil)
		if err != nil {
			if errors.Is(err, ErrNoLeader) && lastErr != nil {
				return 0, fmt.Errorf("%w: last attempt: %w", ErrNoLeader, lastErr)
			}
			return 0, err
		}
		var r *readRound
		if leaderAddr == "" {
			r = n.local.join()
		} else {
			r = n.remote.join()
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return 0, n.ctxErr(ctx)
		}
		if r.err != nil {
			if leaderAddr == "" || errors.Is(r.err, ErrShutdown) {
				return 0, r.err
			}
			// The leader could not be reached or has changed: try again
			// with whoever leads next, until the deadline.
			lastErr = r.err
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%w: %w", ErrNoLeader, r.err)
			}
			select {
			case <-time.After(remoteRetryDelay):
			case <-ctx.Done():
				return 0, n.ctxErr(ctx)
			}
			continue
		}
		if err := n.fsm.WaitApplied(ctx, r.index); err != nil {
			return 0, n.ctxErr(ctx)
		}
		return r.index, nil
	}
}

// leaderReadIndex is the leader's half of ReadIndex, for a follower's RPC:
// a confirmed read index, without waiting for the local FSM (the follower
// waits for its own).
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	if n.ctx.Err() != nil {
		return 0, ErrShutdown
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	if _, err := n.awaitReadReady(ctx, deadline, false); err != nil {
		return 0, err
	}
	r := n.local.join()
	select {
	case <-r.done:
	case <-ctx.Done():
		return 0, n.ctxErr(ctx)
	}
	return r.index, r.err
}

// awaitReadReady waits until this node is leader with its barrier applied
// (leaderAddr ""), or, when forward is set, until another node is known to
// lead (its raft address is returned). Without forward it fails fast with
// ErrNotLeader when another node leads. It waits while an election or this
// node's barrier is in progress.
func (n *Node) awaitReadReady(ctx context.Context, deadline time.Time, forward bool) (leaderAddr raft.ServerAddress, err error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := n.changed()
		if n.readReady() {
			return "", nil
		}
		if n.raft.State() != raft.Leader {
			if addr, id := n.raft.LeaderWithID(); id != "" && id != raft.ServerID(n.cfg.NodeName) {
				if forward {
					return addr, nil
				}
				return "", fmt.Errorf("%w: leader is %s at %s", ErrNotLeader, id, addr)
			}
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-ch:
		case <-timer.C:
			if n.raft.State() == raft.Leader {
				return "", fmt.Errorf("%w: %w", ErrTimeout, ErrNotReadReady)
			}
			return "", ErrNoLeader
		case <-ctx.Done():
			return "", n.ctxErr(ctx)
		}
	}
}

// maxRoundsInFlight bounds how many shared rounds of one kind (local
// verification, or remote read index) run at once.
const maxRoundsInFlight = 3

// runRounds starts q's rounds, at most maxRoundsInFlight at a time, each
// running round. Taking the pending round out of the queue is the moment it
// starts: later callers create a new one. A pending round waits for a free
// slot, collecting callers meanwhile. On shutdown the pending round fails
// with ErrShutdown.
func (n *Node) runRounds(q *roundQueue, round func() (uint64, error)) {
	defer n.wg.Done()
	slots := make(chan struct{}, maxRoundsInFlight)
	for {
		select {
		case <-q.kick:
		case <-n.ctx.Done():
			if r := q.take(); r != nil {
				r.err = ErrShutdown
				close(r.done)
			}
			return
		}
		select {
		case slots <- struct{}{}:
		case <-n.ctx.Done():
			continue // the shutdown case above fails the pending round
		}
		r := q.take()
		if r == nil {
			<-slots
			continue
		}
		q.rounds.Add(1)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			r.index, r.err = round()
			close(r.done)
			<-slots
		}()
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

const (
	// remoteRetryDelay spaces a follower's attempts to get a read index
	// after one failed (leader unreachable or changed).
	remoteRetryDelay = 50 * time.Millisecond

	// remoteRoundTimeout bounds one remote read-index round, so a leader
	// that stopped answering does not hold up later rounds for long.
	remoteRoundTimeout = 3 * time.Second
)

// roundQueue holds the shared round callers join next, with the
// join-the-next-round rule: a caller joins the round that has not started
// yet, never one in progress. The leader's local verification rounds and a
// follower's remote read-index rounds each have one.
type roundQueue struct {
	mu      sync.Mutex
	pending *readRound
	kick    chan struct{} // wakes runRounds; capacity 1
	rounds  atomic.Uint64 // rounds run, for tests and metrics
	joins   atomic.Uint64 // callers that joined a round; joins/rounds is the sharing ratio
}

// join returns the round that has not started yet, creating it (and waking
// runRounds) if there is none.
func (q *roundQueue) join() *readRound {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.joins.Add(1)
	if q.pending == nil {
		q.pending = &readRound{done: make(chan struct{})}
		select {
		case q.kick <- struct{}{}:
		default: // a kick is already queued; it will pick this round up
		}
	}
	return q.pending
}

func (q *roundQueue) take() *readRound {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.pending
	q.pending = nil
	return r
}

// remoteRound asks the current leader for a read index.
func (n *Node) remoteRound() (uint64, error) {
	if h := n.remoteHook.Load(); h != nil {
		(*h)()
	}
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return 0, ErrNoLeader
	}
	if id == raft.ServerID(n.cfg.NodeName) {
		return 0, fmt.Errorf("%w: this node became leader", ErrNotLeader)
	}
	ctx, cancel := context.WithTimeout(n.ctx, min(n.cfg.ApplyTimeout, remoteRoundTimeout))
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opReadIndex})
	if err != nil {
		if errors.Is(err, ErrShutdown) && n.ctx.Err() == nil {
			// The leader is shutting down, not this node.
			return 0, fmt.Errorf("%w: leader %s is shutting down: %v", ErrNoLeader, id, err)
		}
		return 0, fmt.Errorf("read index from leader %s at %s: %w", id, addr, err)
	}
	return resp.Index, nil
}
