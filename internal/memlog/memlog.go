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

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// Log applies proposals to FSM in order.
type Log struct {
	mu    sync.Mutex
	FSM   *fsm.FSM
	index uint64
}

// New is a Log over an empty fsm.
func New() *Log { return &Log{FSM: fsm.New()} }

// Propose applies cmd at the next index and returns its result.
func (l *Log) Propose(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	res, ok := l.FSM.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: cmd.Encode()}).(*fsm.Result)
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
