package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// freshSampleEvery is how often the commit index is sampled for the
// staleness bound; freshSamples how many are kept (a minute's worth), so
// bounds up to a minute are exact and longer ones use the oldest sample.
const (
	freshSampleEvery = 100 * time.Millisecond
	freshSamples     = 600
	// inContactWithin: without the internal RPC, a sample counts only if
	// the follower heard from a leader this recently when it was taken.
	inContactWithin = time.Second
	// freshRPCTimeout bounds a follower's question to the leader; a
	// sample that gets no answer counts for nothing.
	freshRPCTimeout = 250 * time.Millisecond
)

type commitSample struct {
	at time.Time
	// commit is an index every write acknowledged before at is at or
	// below (the leader's applied index).
	commit uint64
	// known: the leader answered (or this node led), so commit means
	// something.
	known bool
}

// freshness remembers how far the cluster had got over the last minute,
// so a node can tell whether its applied state holds every write the
// cluster had acknowledged d ago.
type freshness struct {
	mu      sync.Mutex
	ring    [freshSamples]commitSample
	next, n int
}

func (f *freshness) add(s commitSample) {
	f.mu.Lock()
	f.ring[f.next] = s
	f.next = (f.next + 1) % freshSamples
	if f.n < freshSamples {
		f.n++
	}
	f.mu.Unlock()
}

// at returns the newest sample taken at or before t, if any.
func (f *freshness) at(t time.Time) (commitSample, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 1; i <= f.n; i++ {
		s := f.ring[(f.next-i+freshSamples)%freshSamples]
		if !s.at.After(t) {
			return s, true
		}
	}
	return commitSample{}, false
}

// sampleCommits records, every freshSampleEvery until the node stops,
// how far the cluster had got: on the leader its own applied index (every
// write it acknowledged has applied there), on a follower the leader's
// applied index asked over the internal RPC. A follower's own commit index
// will not do: raft caps it at the follower's last log entry, so a
// follower that cannot append (a full disk) would count itself current.
// Without the internal RPC (in-process tests) the follower's commit index
// while in contact stands in.
func (n *Node) sampleCommits() {
	defer n.wg.Done()
	t := time.NewTicker(freshSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			n.fresh.add(n.sampleCommit(now))
		}
	}
}

func (n *Node) sampleCommit(now time.Time) commitSample {
	if n.raft.State() == raft.Leader {
		return commitSample{at: now, commit: n.fsm.AppliedIndex(), known: true}
	}
	addr, _ := n.raft.LeaderWithID()
	if addr == "" {
		return commitSample{at: now}
	}
	if n.dialRPC == nil {
		lc := n.raft.LastContact()
		known := !lc.IsZero() && now.Sub(lc) <= inContactWithin
		return commitSample{at: now, commit: n.raft.CommitIndex(), known: known}
	}
	ctx, cancel := context.WithTimeout(n.ctx, freshRPCTimeout)
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opStats})
	if err != nil || resp.Stats == nil || resp.Stats.State != raft.Leader.String() {
		return commitSample{at: now}
	}
	return commitSample{at: now, commit: resp.Stats.Applied, known: true}
}

// LeaderContactWithin reports whether this node's local state is at most
// d old: it leads or has heard from a leader within d, and it has applied
// every entry the leader had applied d ago. The API serves resourceVersion=0 reads and watches from local
// state only while this holds (--max-stale-read). Contact alone is not
// enough: a node that has just restarted hears from the leader at once,
// yet serves the state of its last snapshot until it has replayed the
// log, and one that has just been re-admitted after a partition is as
// far behind as the partition was long. For the first d after a start
// there is no sample old enough, so the answer is no.
func (n *Node) LeaderContactWithin(d time.Duration) bool {
	if n.raft.State() != raft.Leader {
		lc := n.raft.LastContact()
		if lc.IsZero() || time.Since(lc) > d {
			return false
		}
	}
	s, ok := n.fresh.at(time.Now().Add(-d))
	return ok && s.known && n.fsm.AppliedIndex() >= s.commit
}
