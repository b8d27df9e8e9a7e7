package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
//     LeaderWait: nothing was written;
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
	deadline := time.Now().Add(n.cfg.LeaderWait)
	var data []byte
	var lastErr error
	for {
		addr, _, err := n.awaitLeaderAddr(ctx, deadline)
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
// else the leader's raft address and ID. It fails with ErrNoLeader at
// deadline.
func (n *Node) awaitLeaderAddr(ctx context.Context, deadline time.Time) (raft.ServerAddress, raft.ServerID, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := n.changed()
		if n.raft.State() == raft.Leader {
			return "", "", nil
		}
		if addr, id := n.raft.LeaderWithID(); id != "" && id != raft.ServerID(n.cfg.NodeName) {
			return addr, id, nil
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-ch:
		case <-timer.C:
			return "", "", ErrNoLeader
		case <-ctx.Done():
			return "", "", n.ctxErr(ctx)
		}
	}
}

// proposeAt has the leader at addr propose data and returns its answer:
// the entry's result, or why there is none. sent is false when the
// command cannot have reached the leader (no connection, or the request
// was never written whole, or it was still queued here when ctx ended).
// A command is never sent twice: unlike the idempotent operations of
// call, a proposal that met a closed pooled connection may have been read.
//
// Concurrent proposals to one leader share frames (proposalQueue): the
// leader's cost per write is then a share of one request and one answer
// rather than one of each, as raft's own appends are shared.
func (n *Node) proposeAt(ctx context.Context, addr raft.ServerAddress, data []byte) (res *fsm.Result, sent bool, err error) {
	p := &proposal{data: data, done: make(chan proposalAnswer, 1)}
	n.proposals.enqueue(n, addr, p)
	var a proposalAnswer
	select {
	case a = <-p.done:
	case <-ctx.Done():
		if n.proposals.withdraw(addr, p) {
			return nil, false, n.ctxErr(ctx)
		}
		return nil, true, fmt.Errorf("%w: the wait for the leader's answer ended: %w", ErrTimeout, ctx.Err())
	}
	if a.err != nil {
		return nil, a.sent, a.err
	}
	r := a.result
	if r.Code != "" || r.Err != "" {
		if e := codeErr(r.Code); e != nil {
			return nil, true, fmt.Errorf("%w: %s answered: %s", e, addr, r.Err)
		}
		return nil, true, fmt.Errorf("%w: %s answered a proposal: %s", ErrTimeout, addr, r.Err)
	}
	if r.Index == 0 {
		return nil, true, fmt.Errorf("%w: the leader at %s answered a proposal without an index", ErrTimeout, addr)
	}
	verdict, err := resultErr(r.Result)
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
		if local := n.fsm.ResultAt(r.Index); local != nil {
			return local, true, nil
		}
		return &fsm.Result{Revision: r.Index}, true, nil
	}
	if werr := n.fsm.WaitApplied(ctx, r.Index); werr == nil {
		if local := n.fsm.ResultAt(r.Index); local != nil {
			return local, true, nil
		}
	}
	return &fsm.Result{Revision: r.Index, Err: verdict}, true, nil
}

const (
	// maxBatchSenders bounds the frames of proposals in flight to one
	// leader: while they are out, new proposals gather for the next.
	maxBatchSenders = 2
	// maxBatchCommands and maxBatchBytes bound one frame.
	maxBatchCommands = 128
	maxBatchBytes    = 4 << 20
)

// proposal is one command waiting to be sent to the leader, and then for
// its answer.
type proposal struct {
	data []byte
	// taken: a sender has it (proposalQueues.mu); it can no longer be
	// withdrawn.
	taken bool
	done  chan proposalAnswer // buffered: the sender never blocks
}

// proposalAnswer is a proposal's fate: the leader's result for it, or err
// (with sent false when it cannot have reached the leader).
type proposalAnswer struct {
	result proposalResult
	sent   bool
	err    error
}

// proposalQueues holds the proposals waiting per leader address.
type proposalQueues struct {
	mu     sync.Mutex
	queues map[raft.ServerAddress]*proposalQueue
	// queued and frames count the proposals queued and the frames sent,
	// binary those sent as internal RPC version 2 and refused those a
	// leader refused to read, sent again as version 1 (tests).
	queued, frames, binary, refused atomic.Int64
}

type proposalQueue struct {
	pending []*proposal
	senders int
}

// enqueue adds p to addr's queue and starts a sender if fewer than
// maxBatchSenders run.
func (qs *proposalQueues) enqueue(n *Node, addr raft.ServerAddress, p *proposal) {
	qs.mu.Lock()
	if qs.queues == nil {
		qs.queues = map[raft.ServerAddress]*proposalQueue{}
	}
	q := qs.queues[addr]
	if q == nil {
		q = &proposalQueue{}
		qs.queues[addr] = q
	}
	q.pending = append(q.pending, p)
	qs.queued.Add(1)
	start := q.senders < maxBatchSenders
	if start {
		q.senders++
	}
	qs.mu.Unlock()
	if start {
		go n.sendProposals(addr, q)
	}
}

// withdraw takes p out of addr's queue if no sender has it yet.
func (qs *proposalQueues) withdraw(addr raft.ServerAddress, p *proposal) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if p.taken {
		return false
	}
	if q := qs.queues[addr]; q != nil {
		for i, x := range q.pending {
			if x == p {
				q.pending = append(q.pending[:i], q.pending[i+1:]...)
				break
			}
		}
	}
	return true
}

// take removes the next batch from q, or returns none and retires the
// calling sender.
func (qs *proposalQueues) take(q *proposalQueue) []*proposal {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	var batch []*proposal
	size := 0
	for len(q.pending) > 0 && len(batch) < maxBatchCommands && (len(batch) == 0 || size+len(q.pending[0].data) <= maxBatchBytes) {
		p := q.pending[0]
		q.pending = q.pending[1:]
		p.taken = true
		size += len(p.data)
		batch = append(batch, p)
	}
	if len(batch) == 0 {
		q.senders--
	}
	return batch
}

// sendProposals sends q's proposals to the leader at addr, a frame at a
// time, until the queue is empty.
func (n *Node) sendProposals(addr raft.ServerAddress, q *proposalQueue) {
	for {
		batch := n.proposals.take(q)
		if len(batch) == 0 {
			return
		}
		n.proposals.frames.Add(1)
		results, sent, err := n.proposeBatch(addr, batch)
		for i, p := range batch {
			a := proposalAnswer{sent: sent, err: err}
			if err == nil {
				a.result = results[i]
			}
			p.done <- a
		}
	}
}

// proposeBatch sends one frame of proposals and reads the leader's answer.
// The frame is binary (internal RPC version 2) once every member reads
// that (the cluster version); a leader that refuses it as a frame it
// cannot read (a build of version 1, or one rolled back to it) has acted
// on none of it, and the same proposals go again as version 1.
func (n *Node) proposeBatch(addr raft.ServerAddress, batch []*proposal) (results []proposalResult, sent bool, err error) {
	ctx, cancel := n.bind(context.Background())
	defer cancel()
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	req := rpcRequest{Op: opPropose, TimeoutMS: n.cfg.ApplyTimeout.Milliseconds()}
	for _, p := range batch {
		req.Commands = append(req.Commands, p.data)
	}
	if n.clusterVersion(FormatRPC) >= 2 {
		req.V = 2
		n.proposals.binary.Add(1)
		results, sent, err = n.sendBatch(ctx, addr, deadline, req, len(batch))
		if !errors.Is(err, errBadRequest) && !errors.Is(err, ErrUnsupportedVersion) {
			return results, sent, err
		}
		n.proposals.refused.Add(1)
		n.lowerClusterVersion(FormatRPC, 2)
		req.V = 0
	}
	return n.sendBatch(ctx, addr, deadline, req, len(batch))
}

// sendBatch sends req, a frame of count proposals, on a connection of its
// own and reads the answer.
func (n *Node) sendBatch(ctx context.Context, addr raft.ServerAddress, deadline time.Time, req rpcRequest, count int) (results []proposalResult, sent bool, err error) {
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
	if _, err := n.remoteErr(resp, addr, req); err != nil {
		// A refused frame may have been the last the peer reads on
		// this connection (a build that cannot parse it closes it).
		_ = conn.Close()
		return nil, true, err
	}
	n.rpcPool.put(addr, conn)
	if len(resp.Proposals) != count {
		return nil, true, fmt.Errorf("%w: the leader at %s answered %d of %d proposals", ErrTimeout, addr, len(resp.Proposals), count)
	}
	return resp.Proposals, true, nil
}

// proposalResult is the leader's answer for one command of a frame: its
// entry and the fsm's verdict, or the error (Code, Err) that kept it from
// one.
type proposalResult struct {
	Index  uint64 `json:"index,omitempty"`
	Result string `json:"result,omitempty"`
	Code   string `json:"code,omitempty"`
	Err    string `json:"err,omitempty"`
}

// serveProposals is the leader's half of Submit: it proposes the commands
// a node sent, all at once (raft group-commits them), if caller proved a
// node identity; each command it refuses (not one a node may submit, or
// not a command) is answered on its own.
//
// A command goes to the log as the bytes that were checked: the fsm
// applies exactly what DecodeCommand read from them, and the encoding is
// canonical (one Command, one encoding), so those bytes are also what
// Encode would write.
func (n *Node) serveProposals(ctx context.Context, cmds [][]byte, caller string, callerErr error) (rpcResponse, error) {
	if callerErr != nil {
		return rpcResponse{}, fmt.Errorf("%w: %v", ErrNotPermitted, callerErr)
	}
	if len(cmds) == 0 || len(cmds) > maxBatchCommands {
		return rpcResponse{}, fmt.Errorf("%w: %d commands in one proposal frame", errBadRequest, len(cmds))
	}
	if h := n.proposeHook.Load(); h != nil {
		(*h)()
	}
	out := make([]proposalResult, len(cmds))
	taken := make([]int, 0, len(cmds)) // indexes into cmds of the commands proposed
	datas := make([][]byte, 0, len(cmds))
	for i, data := range cmds {
		cmd, err := fsm.DecodeCommand(data)
		if err == nil {
			err = submittable(cmd)
		} else {
			err = fmt.Errorf("%w: %v", errBadRequest, err)
		}
		if err != nil {
			n.logger.Warn("internal RPC: refused a proposal", "caller", caller, "error", err)
			out[i] = proposalResult{Code: errCode(err), Err: err.Error()}
			continue
		}
		n.metrics.received.Inc()
		taken = append(taken, i)
		datas = append(datas, data)
	}
	if len(datas) == 0 {
		return rpcResponse{Proposals: out}, nil
	}
	failed := func(err error) proposalResult { return proposalResult{Code: errCode(err), Err: err.Error()} }
	proposed, err := n.proposeEncoded(ctx, datas)
	if err != nil {
		for _, i := range taken {
			out[i] = failed(err)
		}
		return rpcResponse{Proposals: out}, nil
	}
	for k, p := range proposed {
		if p.err != nil {
			out[taken[k]] = failed(p.err)
			continue
		}
		out[taken[k]] = proposalResult{Index: p.res.Revision, Result: verdictCode(p.res.Err)}
	}
	return rpcResponse{Proposals: out}, nil
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
