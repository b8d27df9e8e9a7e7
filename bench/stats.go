package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// maxSamples bounds the latencies one workload keeps. Past it, reservoir
// sampling keeps a uniform sample, so percentiles stay unbiased while
// memory stays bounded however fast the server is.
const maxSamples = 1 << 20

// maxErrorSamples is how many distinct error messages a workload keeps.
const maxErrorSamples = 5

// recorder collects one workload's outcomes from many goroutines.
type recorder struct {
	mu        sync.Mutex
	ok        int64
	errs      int64
	samples   []time.Duration
	rng       *rand.Rand
	errSample []string
}

func newRecorder() *recorder {
	return &recorder{rng: rand.New(rand.NewPCG(1, 2))}
}

// success records one successful operation that took d.
func (r *recorder) success(d time.Duration) {
	r.mu.Lock()
	r.ok++
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, d)
	} else if i := r.rng.Int64N(r.ok); i < maxSamples {
		r.samples[i] = d
	}
	r.mu.Unlock()
}

// failure records one failed operation; its message is kept when it is one
// of the first distinct ones.
func (r *recorder) failure(err error) { r.failures(1, err) }

// failures records n failed operations with one cause.
func (r *recorder) failures(n int64, err error) {
	if n <= 0 {
		return
	}
	msg := "unknown error"
	if err != nil {
		msg = err.Error()
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
	}
	r.mu.Lock()
	r.errs += n
	if len(r.errSample) < maxErrorSamples && !slices.Contains(r.errSample, msg) {
		r.errSample = append(r.errSample, msg)
	}
	r.mu.Unlock()
}

// counts is the live view for the progress line.
func (r *recorder) counts() (ok, errs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.errs
}

// result summarises what was recorded over elapsed.
func (r *recorder) result(name string, elapsed time.Duration) WorkloadResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := WorkloadResult{
		Name: name, Ops: r.ok, Errors: r.errs, Seconds: elapsed.Seconds(),
		Latency: Summarize(r.samples), ErrorSamples: slices.Clone(r.errSample),
	}
	if elapsed > 0 {
		w.OpsPerSec = float64(r.ok) / elapsed.Seconds()
	}
	return w
}

// Summarize computes the latency summary of samples (in any order; the
// slice is sorted in place). Percentiles use the nearest-rank method: the
// p-th percentile is the smallest sample with at least p% of the samples
// at or below it. No samples give the zero Latency.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum float64
	for _, s := range samples {
		sum += ms(s)
	}
	return Latency{
		P50Ms:  ms(percentile(samples, 50)),
		P90Ms:  ms(percentile(samples, 90)),
		P99Ms:  ms(percentile(samples, 99)),
		MaxMs:  ms(samples[len(samples)-1]),
		MeanMs: sum / float64(len(samples)),
	}
}

// percentile is the nearest-rank p-th percentile of sorted, which must not
// be empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
