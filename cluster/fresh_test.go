package cluster

import (
	"testing"
	"time"
)

func TestFreshnessOldestKnownSince(t *testing.T) {
	var f freshness
	t0 := time.Unix(1000, 0)
	if _, ok := f.oldestKnownSince(t0); ok {
		t.Fatal("an empty ring answered a sample")
	}
	// One sample a second; the leader did not answer at seconds 20–29.
	for i := 0; i < freshSamples+10; i++ {
		f.add(commitSample{at: t0.Add(time.Duration(i) * time.Second), commit: uint64(i), known: i < 20 || i >= 30})
	}
	for _, tc := range []struct {
		since  time.Duration
		want   uint64
		wantOK bool
	}{
		{since: 5 * time.Second, want: 10, wantOK: true},                     // older than the ring: the oldest kept
		{since: 100 * time.Second, want: 100, wantOK: true},                  // exactly a sample
		{since: 100*time.Second + time.Millisecond, want: 101, wantOK: true}, // the next one
		{since: 20 * time.Second, want: 30, wantOK: true},                    // unanswered samples are skipped
		{since: time.Duration(freshSamples+10) * time.Second, wantOK: false}, // newer than every sample
	} {
		s, ok := f.oldestKnownSince(t0.Add(tc.since))
		if ok != tc.wantOK || (ok && s.commit != tc.want) {
			t.Errorf("since +%v: got %d %v, want %d %v", tc.since, s.commit, ok, tc.want, tc.wantOK)
		}
	}
}

// Every node of a new cluster is soon fresh within a short bound: the
// leader once it is read-ready, the followers once they have applied what
// the leader had.
func TestLeaderContactWithin(t *testing.T) {
	c := newInmemCluster(t, 3, true)
	for _, n := range c.nodes {
		waitFor(t, n.cfg.NodeName+" to be fresh within 300ms", func() bool { return n.LeaderContactWithin(300 * time.Millisecond) })
	}
}

// BenchmarkFreshnessOldestKnownSince is the staleness rule's cost on a
// follower, paid by every API request (api.Server.withCaughtUp): a full
// ring searched for a 5 s bound, from every core at once.
func BenchmarkFreshnessOldestKnownSince(b *testing.B) {
	var f freshness
	now := time.Now()
	for i := 0; i < freshSamples; i++ {
		f.add(commitSample{at: now.Add(time.Duration(i-freshSamples) * freshSampleEvery), commit: uint64(i), known: true})
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.oldestKnownSince(time.Now().Add(-5 * time.Second))
		}
	})
}
