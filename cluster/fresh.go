package cluster

import (
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
	// inContactWithin: a sample counts only if this node led or heard
	// from a leader this recently when it was taken, so that its commit
	// index was the leader's, give or take a heartbeat.
	inContactWithin = time.Second
)

type commitSample struct {
	at     time.Time
	commit uint64
	// known: the node was in contact with a leader, so commit is a
	// commit index the cluster had reached.
	known bool
}

// freshness remembers the commit index this node knew over the last
// minute, so it can tell whether its applied state holds every write the
// cluster had committed d ago.
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

// sampleCommits records the commit index every freshSampleEvery until the
// node stops.
func (n *Node) sampleCommits() {
	defer n.wg.Done()
	t := time.NewTicker(freshSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			known := n.raft.State() == raft.Leader
			if lc := n.raft.LastContact(); !known && !lc.IsZero() && now.Sub(lc) <= inContactWithin {
				known = true
			}
			n.fresh.add(commitSample{at: now, commit: n.raft.CommitIndex(), known: known})
		}
	}
}

// LeaderContactWithin reports whether this node's local state is at most
// d old: it leads or has heard from a leader within d, and it has applied
// every entry it knew to be committed d ago (while in contact with a
// leader). The API serves resourceVersion=0 reads and watches from local
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
