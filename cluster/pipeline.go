package cluster

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// errPipelineRefused is what a pipeline gives raft's sender once the
// follower has refused one of its appends (or an answer was lost), so that
// raft closes the pipeline and goes back to one append at a time.
var errPipelineRefused = errors.New("cluster: pipeline stopped: the follower refused an append or its answer was lost")

// pipelineTransport is raft's network transport with a pipeline that
// cannot wedge.
//
// hashicorp/raft v1.7.3 deadlocks a follower's replication when the
// follower refuses a pipelined append (a failed log write, such as a full
// disk, then "failed to get previous log" for the appends behind it) or an
// answer times out: its decoder (pipelineDecode) stops reading the
// pipeline's answers at the first unsuccessful one, while its sender
// (pipelineReplicate) may still pick another send, since its select
// weighs the decoder's exit against a ready trigger at random. With the
// default MaxRPCsInFlight the transport's channels are unbuffered, so that
// send parks for ever: the transport's reader waits to hand over an
// answer nobody takes. The pipeline is closed only after the sender
// returns, heartbeats go on from their own goroutine, and the follower
// stays a follower that receives no entry until the leader changes
// (hashicorp/raft#612; chaos seed 1796236270951533177 held one 108 s).
//
// pipelineTransport keeps reading the transport's answers itself and
// refuses every send after the first unsuccessful answer, so the sender
// stops at its next send and raft closes the pipeline as it does on a
// send error; replication then goes on one append at a time, which finds
// the follower's last index, and pipelines again once an append succeeds.
type pipelineTransport struct {
	*raft.NetworkTransport
}

// AppendEntriesPipeline wraps the transport's pipeline (see
// pipelineTransport).
func (t pipelineTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inner, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newStoppingPipeline(inner), nil
}

// stoppingPipeline is an AppendPipeline that refuses sends once an answer
// was unsuccessful and never leaves the inner pipeline's answers unread.
type stoppingPipeline struct {
	inner raft.AppendPipeline
	// answers is what raft's decoder reads. It holds every answer the
	// decoder may leave behind when it stops at an unsuccessful one: those
	// to sends already under way then, which the inner pipeline bounds.
	answers chan raft.AppendFuture
	// refused is set, before the unsuccessful answer is handed on, by the
	// goroutine that reads the inner pipeline.
	refused   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	// done is closed when the reading goroutine has returned.
	done chan struct{}
}

// pipelineAnswersHeld is the capacity of stoppingPipeline.answers: more
// than the sends the network transport can have under way (its
// MaxRPCsInFlight, two by default), so the reader never waits on a
// decoder that has stopped.
const pipelineAnswersHeld = 16

func newStoppingPipeline(inner raft.AppendPipeline) *stoppingPipeline {
	p := &stoppingPipeline{
		inner:   inner,
		answers: make(chan raft.AppendFuture, pipelineAnswersHeld),
		closed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	go p.read()
	return p
}

// read hands the inner pipeline's answers on until the pipeline is
// closed. After an unsuccessful answer the decoder reads no more, so the
// answers behind it are dropped rather than queued: raft replicates them
// again one at a time.
func (p *stoppingPipeline) read() {
	defer close(p.done)
	in := p.inner.Consumer()
	for {
		select {
		case f := <-in:
			if p.refused.Load() {
				continue
			}
			if f.Error() != nil || !f.Response().Success {
				p.refused.Store(true)
			}
			select {
			case p.answers <- f:
			case <-p.closed:
				return
			}
		case <-p.closed:
			return
		}
	}
}

// AppendEntries sends unless an answer was unsuccessful.
func (p *stoppingPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if p.refused.Load() {
		return nil, errPipelineRefused
	}
	return p.inner.AppendEntries(args, resp)
}

// Consumer is where raft's decoder reads the answers.
func (p *stoppingPipeline) Consumer() <-chan raft.AppendFuture { return p.answers }

// Close closes the inner pipeline and stops the reader.
func (p *stoppingPipeline) Close() error {
	p.closeOnce.Do(func() { close(p.closed) })
	err := p.inner.Close()
	<-p.done
	return err
}
