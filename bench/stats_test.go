package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func repeatMs(v float64, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	return out
}

func msList(vals ...float64) []time.Duration {
	out := make([]time.Duration, len(vals))
	for i, v := range vals {
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	return out
}

// oneToN is 1 ms, 2 ms, ... n ms, shuffled.
func oneToN(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Millisecond
	}
	rand.New(rand.NewPCG(7, 7)).Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		want    Latency
	}{
		{"no samples give zeros", nil, Latency{}},
		{"one sample is every percentile", msList(4), Latency{P50Ms: 4, P90Ms: 4, P99Ms: 4, MaxMs: 4, MeanMs: 4}},
		{"nearest rank over 1..100 ms", oneToN(100), Latency{P50Ms: 50, P90Ms: 90, P99Ms: 99, MaxMs: 100, MeanMs: 50.5}},
		{"nearest rank over 1..1000 ms", oneToN(1000), Latency{P50Ms: 500, P90Ms: 900, P99Ms: 990, MaxMs: 1000, MeanMs: 500.5}},
		{"nearest rank rounds the rank up", msList(1, 2, 3), Latency{P50Ms: 2, P90Ms: 3, P99Ms: 3, MaxMs: 3, MeanMs: 2}},
		{"order of samples does not matter", msList(10, 1, 5, 2), Latency{P50Ms: 2, P90Ms: 10, P99Ms: 10, MaxMs: 10, MeanMs: 4.5}},
		{"one slow outlier in 120 shows only in max and mean", append(repeatMs(1, 119), msList(500)...),
			Latency{P50Ms: 1, P90Ms: 1, P99Ms: 1, MaxMs: 500, MeanMs: (119 + 500) / 120.0}},
		{"two slow in 100 reach p99", append(repeatMs(1, 98), msList(300, 400)...),
			Latency{P50Ms: 1, P90Ms: 1, P99Ms: 300, MaxMs: 400, MeanMs: (98 + 700) / 100.0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.samples)
			if !approx(got.P50Ms, tc.want.P50Ms) || !approx(got.P90Ms, tc.want.P90Ms) || !approx(got.P99Ms, tc.want.P99Ms) ||
				!approx(got.MaxMs, tc.want.MaxMs) || !approx(got.MeanMs, tc.want.MeanMs) {
				t.Fatalf("Summarize = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func approx(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

func TestRecorder(t *testing.T) {
	t.Run("successes and failures are counted apart", func(t *testing.T) {
		r := newRecorder()
		for i := 1; i <= 10; i++ {
			r.success(time.Duration(i) * time.Millisecond)
		}
		r.failure(errors.New("boom"))
		r.failures(3, errors.New("boom"))
		got := r.result("x", 2*time.Second)
		if got.Ops != 10 || got.Errors != 4 || !approx(got.OpsPerSec, 5) || !approx(got.Latency.P50Ms, 5) {
			t.Fatalf("result %+v", got)
		}
		if len(got.ErrorSamples) != 1 || got.ErrorSamples[0] != "boom" {
			t.Fatalf("error samples %q, want one \"boom\"", got.ErrorSamples)
		}
	})
	t.Run("error samples are distinct and bounded", func(t *testing.T) {
		r := newRecorder()
		for i := range 3 * maxErrorSamples {
			r.failure(fmt.Errorf("error %d", i%(2*maxErrorSamples)))
		}
		got := r.result("x", time.Second)
		if got.Errors != 3*maxErrorSamples || len(got.ErrorSamples) != maxErrorSamples {
			t.Fatalf("%d errors, %d samples: %q", got.Errors, len(got.ErrorSamples), got.ErrorSamples)
		}
	})
	t.Run("no time gives no rate", func(t *testing.T) {
		r := newRecorder()
		r.failure(errors.New("preparing: no"))
		got := r.result("x", 0)
		if got.OpsPerSec != 0 || !got.Failed() {
			t.Fatalf("result %+v", got)
		}
	})
	t.Run("samples stay bounded past maxSamples", func(t *testing.T) {
		r := newRecorder()
		for i := range maxSamples + 1000 {
			r.success(time.Duration(i))
		}
		if len(r.samples) != maxSamples || r.ok != maxSamples+1000 {
			t.Fatalf("%d samples kept, %d ops counted", len(r.samples), r.ok)
		}
	})
}
