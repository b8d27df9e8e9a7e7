package cluster

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// freshSampleEvery is how often the leader's progress is sampled for the
// staleness bound; freshSamples how many are kept (a minute's worth):
// a bound longer than that is held to the last minute.
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

// oldestKnownSince returns the oldest sample taken at or after t in which
// the leader answered. Its commit is at least every index acknowledged
// before t, and of all such samples it asks the least of a node. The API
// asks on every request (api.Server.withCaughtUp), so the ring, in the
// order its samples were taken (the ticker's monotonic times), is
// searched by halves rather than walked.
func (f *freshness) oldestKnownSince(t time.Time) (commitSample, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := func(i int) commitSample { return f.ring[(f.next-f.n+i+freshSamples)%freshSamples] }
	for i := sort.Search(f.n, func(i int) bool { return !at(i).at.Before(t) }); i < f.n; i++ {
		if s := at(i); s.known {
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
// d old: it holds every write the cluster acknowledged more than d ago.
// The API serves resourceVersion=0 reads and watches from local state only
// while this holds (--max-stale-read).
//
// A leader that has applied its term's barrier holds every acknowledged
// write. Any other node needs to have heard from a leader within d, and
// to have applied at least the leader's applied index as sampled at some
// moment within the last d (that index covers every write acknowledged
// before the sample). Contact alone is not enough: a node that has just
// restarted hears from the leader at once yet serves its last snapshot's
// state until it has replayed the log, one whose disk is full hears the
// leader but applies nothing, and one re-admitted after a partition is as
// far behind as the partition was long.
func (n *Node) LeaderContactWithin(d time.Duration) bool {
	if n.raft.State() == raft.Leader {
		if n.readReady() {
			return true
		}
	} else {
		lc := n.raft.LastContact()
		if lc.IsZero() || time.Since(lc) > d {
			return false
		}
	}
	s, ok := n.fresh.oldestKnownSince(time.Now().Add(-d))
	return ok && n.fsm.AppliedIndex() >= s.commit
}
