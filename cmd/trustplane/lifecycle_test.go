package main

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestLivezGracePeriod(t *testing.T) {
	start := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	failing := healthz.NamedCheck("raft", func(*http.Request) error { return errors.New("not running") })
	cases := []struct {
		name    string
		grace   time.Duration
		elapsed time.Duration
		passes  bool
	}{
		{"no grace period: the check says", 0, 0, false},
		{"inside the grace period: passes", time.Minute, 59 * time.Second, true},
		{"after the grace period: the check says", time.Minute, 61 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			checks := delayedChecks(tc.grace, clk, failing)
			clk.SetTime(start.Add(tc.elapsed))
			if len(checks) != 1 || checks[0].Name() != "raft" {
				t.Fatalf("checks %v", checks)
			}
			if err := checks[0].Check(nil); (err == nil) != tc.passes {
				t.Fatalf("Check: %v, want passing %v", err, tc.passes)
			}
		})
	}
}

func TestLifecycleFlagsRefuseNegativeDurations(t *testing.T) {
	for _, args := range [][]string{
		{"--shutdown-delay-duration", "-1s"},
		{"--livez-grace-period", "-1s"},
	} {
		if _, err := parseServe(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	o, err := parseServe([]string{"--shutdown-delay-duration", "70s", "--livez-grace-period", "2m"})
	if err != nil || o.shutdownDelay != 70*time.Second || o.livezGrace != 2*time.Minute {
		t.Fatalf("parsed %+v, %v", o, err)
	}
}
