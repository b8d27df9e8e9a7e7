package cluster

import (
	"testing"
	"time"
)

func TestFreshnessSampleAt(t *testing.T) {
	var f freshness
	t0 := time.Unix(1000, 0)
	if _, ok := f.at(t0); ok {
		t.Fatal("an empty ring answered a sample")
	}
	for i := 0; i < freshSamples+10; i++ {
		f.add(commitSample{at: t0.Add(time.Duration(i) * time.Second), commit: uint64(i), known: true})
	}
	for _, tc := range []struct {
		at     time.Duration
		want   uint64
		wantOK bool
	}{
		{at: 5 * time.Second, wantOK: false}, // overwritten: older than the ring
		{at: time.Duration(freshSamples+9) * time.Second, want: freshSamples + 9, wantOK: true},
		{at: time.Duration(freshSamples+9)*time.Second + 500*time.Millisecond, want: freshSamples + 9, wantOK: true},
		{at: 100*time.Second + 999*time.Millisecond, want: 100, wantOK: true},
		{at: 10 * time.Second, want: 10, wantOK: true}, // the oldest kept
	} {
		s, ok := f.at(t0.Add(tc.at))
		if ok != tc.wantOK || (ok && s.commit != tc.want) {
			t.Errorf("at +%v: got %d %v, want %d %v", tc.at, s.commit, ok, tc.want, tc.wantOK)
		}
	}
}

// A node that has just formed a cluster has no sample old enough for a
// long bound, so it must not claim its state is that fresh; for a short
// one it does once it has been in contact for that long.
func TestLeaderContactWithinNeedsHistory(t *testing.T) {
	c := newInmemCluster(t, 3, true)
	for _, n := range c.nodes {
		if n.LeaderContactWithin(time.Hour) {
			t.Fatalf("%s claims state fresh within an hour a moment after it started", n.cfg.NodeName)
		}
	}
	for _, n := range c.nodes {
		waitFor(t, n.cfg.NodeName+" to be fresh within 300ms", func() bool { return n.LeaderContactWithin(300 * time.Millisecond) })
	}
}
