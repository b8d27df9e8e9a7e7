// Package memlog is the real fsm behind a one-voter log, what a single
// raft node does without the disk and the network: Propose applies each
// command at the next index. Tests and benchmarks of the storage layer and
// the registry use it to measure and check their own code over the real
// state machine. It is never used by the server.
package memlog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// Log applies proposals to FSM in order.
type Log struct {
	mu    sync.Mutex
	FSM   *fsm.FSM
	index uint64
	// entries are the commands applied, in order, for followers.
	entries [][]byte
}

// New is a Log over an empty fsm.
func New() *Log { return &Log{FSM: fsm.New()} }

// Propose applies cmd at the next index and returns its result.
func (l *Log) Propose(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	data := cmd.Encode()
	l.entries = append(l.entries, data)
	res, ok := l.FSM.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: data}).(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("entry %d: no result", l.index)
	}
	return res, nil
}

// ReadIndex is the applied index: a one-voter log is always current.
func (l *Log) ReadIndex(context.Context) (uint64, error) { return l.FSM.AppliedIndex(), nil }

// AppliedIndex is the fsm's applied index.
func (l *Log) AppliedIndex() uint64 { return l.FSM.AppliedIndex() }

// WaitApplied waits until the fsm has applied index.
func (l *Log) WaitApplied(ctx context.Context, index uint64) error {
	return l.FSM.WaitApplied(ctx, index)
}

// Get reads key at rev from the fsm.
func (l *Log) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) { return l.FSM.Get(key, rev) }

// List lists p from the fsm.
func (l *Log) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return l.FSM.List(p, opts)
}

// Follower is another node of Log's cluster, whose fsm trails Log's: it
// applies Log's entries only when it catches up. Its Get and List read
// its own fsm, so the storage layer over it reads what a node executing
// writes on a state behind the leader's reads. It catches up on
// ReadIndex, and, for a proposal the fsm refused, before answering it (as
// cluster.Node.Submit waits to apply such a verdict's entry); a write that
// applied is answered without it, as Submit answers one.
type Follower struct {
	mu  sync.Mutex
	log *Log
	FSM *fsm.FSM
	// ReadIndexes counts the read indexes asked of it.
	ReadIndexes atomic.Int64
	// Cut stops WaitApplied from catching up, as a node that lost its
	// leader stops applying: the wait then lasts until its context ends.
	Cut atomic.Bool
}

// NewFollower is a follower of l that has applied nothing yet.
func NewFollower(l *Log) *Follower { return &Follower{log: l, FSM: fsm.New()} }

// CatchUp applies every entry Log has applied.
func (f *Follower) CatchUp() {
	f.log.mu.Lock()
	entries := f.log.entries
	f.log.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := f.FSM.AppliedIndex(); i < uint64(len(entries)); i++ {
		f.FSM.Apply(&raft.Log{Index: i + 1, Term: 1, Type: raft.LogCommand, Data: entries[i]})
	}
}

// Propose has Log apply cmd.
func (f *Follower) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	res, err := f.log.Propose(ctx, cmd)
	if err == nil && res.Err != nil {
		f.CatchUp()
	}
	return res, err
}

// ReadIndex catches up and returns the applied index.
func (f *Follower) ReadIndex(context.Context) (uint64, error) {
	f.ReadIndexes.Add(1)
	f.CatchUp()
	return f.FSM.AppliedIndex(), nil
}

// AppliedIndex is the follower's applied index.
func (f *Follower) AppliedIndex() uint64 { return f.FSM.AppliedIndex() }

// WaitApplied catches up when index is beyond what it applied, unless
// Cut.
func (f *Follower) WaitApplied(ctx context.Context, index uint64) error {
	if f.FSM.AppliedIndex() < index && !f.Cut.Load() {
		f.CatchUp()
	}
	return f.FSM.WaitApplied(ctx, index)
}

// Get reads key at rev from the follower's fsm.
func (f *Follower) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) { return f.FSM.Get(key, rev) }

// List lists p from the follower's fsm.
func (f *Follower) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return f.FSM.List(p, opts)
}
