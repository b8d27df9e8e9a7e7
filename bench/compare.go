package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Ratio compares one workload present in two results, as B/A: throughput
// above 1 and latency below 1 mean B did better. A ratio whose A side is
// zero is NaN.
type Ratio struct {
	Workload            string
	A, B                WorkloadResult
	OpsPerSec, P50, P99 float64
	// ServerCPUPerOp is NaN unless both runs measured their servers.
	ServerCPUPerOp float64
}

// Ratios pairs the workloads a and b both have, in a's order.
func Ratios(a, b *Result) []Ratio {
	var out []Ratio
	for _, x := range a.Workloads {
		y, ok := b.Workload(x.Name)
		if !ok {
			continue
		}
		out = append(out, Ratio{
			Workload: x.Name, A: x, B: y,
			OpsPerSec:      ratio(y.OpsPerSec, x.OpsPerSec),
			P50:            ratio(y.Latency.P50Ms, x.Latency.P50Ms),
			P99:            ratio(y.Latency.P99Ms, x.Latency.P99Ms),
			ServerCPUPerOp: ratio(y.ServerCPUPerOpMs, x.ServerCPUPerOpMs),
		})
	}
	return out
}

func ratio(b, a float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return b / a
}

// WriteCompare prints the ratios of b to a, labelled with the names the
// caller gives them (file names, say), and the workloads only one of them
// has.
func WriteCompare(w io.Writer, nameA string, a *Result, nameB string, b *Result) error {
	fmt.Fprintf(w, "A = %s (server %s, %d node(s), %d client(s))\n", nameA, orUnknown(a.Environment.ServerVersion), a.Environment.Nodes, a.Environment.Clients)
	fmt.Fprintf(w, "B = %s (server %s, %d node(s), %d client(s))\n", nameB, orUnknown(b.Environment.ServerVersion), b.Environment.Nodes, b.Environment.Clients)
	fmt.Fprintln(w, "ratios are B/A: ops/s above 1.00 and latency below 1.00 mean B did better")
	fmt.Fprintln(w)
	srv := a.Server != nil && b.Server != nil
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "WORKLOAD\tA OPS/S\tB OPS/S\tOPS/S B/A\tA P50(ms)\tB P50(ms)\tP50 B/A\tA P99(ms)\tB P99(ms)\tP99 B/A\t"
	if srv {
		head += "A SRV CPU/OP(ms)\tB SRV CPU/OP(ms)\tSRV CPU/OP B/A\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range Ratios(a, b) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", r.Workload,
			rate(r.A.OpsPerSec), rate(r.B.OpsPerSec), times(r.OpsPerSec),
			millis(r.A.Latency.P50Ms), millis(r.B.Latency.P50Ms), times(r.P50),
			millis(r.A.Latency.P99Ms), millis(r.B.Latency.P99Ms), times(r.P99))
		if srv {
			fmt.Fprintf(tw, "%s\t%s\t%s\t", millis(r.A.ServerCPUPerOpMs), millis(r.B.ServerCPUPerOpMs), times(r.ServerCPUPerOp))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if srv {
		fmt.Fprintf(w, "\nserver peak RSS: A %s, B %s, B/A %s (server CPU per op and memory: below 1.00 means B did better)\n",
			mib(a.Server.PeakRSSBytes), mib(b.Server.PeakRSSBytes), times(ratio(float64(b.Server.PeakRSSBytes), float64(a.Server.PeakRSSBytes))))
	}
	if only := missing(a, b); len(only) > 0 {
		fmt.Fprintf(w, "\nonly in A: %s\n", strings.Join(only, ", "))
	}
	if only := missing(b, a); len(only) > 0 {
		fmt.Fprintf(w, "\nonly in B: %s\n", strings.Join(only, ", "))
	}
	return nil
}

// missing lists x's workloads that y lacks.
func missing(x, y *Result) []string {
	var out []string
	for _, w := range x.Workloads {
		if _, ok := y.Workload(w.Name); !ok {
			out = append(out, w.Name)
		}
	}
	return out
}

func times(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Median combines runs of one setup (rounds of an A/B comparison) into one
// result: per workload, the median of each figure over the runs that have
// it; the peak memory is the median of the runs' peaks. The environment is
// the first run's. A workload missing from some runs is the median of the
// others; one that failed in a run counts with its zero figures, so that
// a failure is not hidden.
func Median(runs []*Result) *Result {
	if len(runs) == 0 {
		return nil
	}
	if len(runs) == 1 {
		return runs[0]
	}
	out := &Result{Format: resultFormat, Environment: runs[0].Environment}
	for _, w := range runs[0].Workloads {
		var ws []WorkloadResult
		for _, r := range runs {
			if x, ok := r.Workload(w.Name); ok {
				ws = append(ws, x)
			}
		}
		m := WorkloadResult{Name: w.Name, Detail: w.Detail}
		m.Ops = int64(median(ws, func(x WorkloadResult) float64 { return float64(x.Ops) }))
		m.Errors = int64(median(ws, func(x WorkloadResult) float64 { return float64(x.Errors) }))
		m.Seconds = median(ws, func(x WorkloadResult) float64 { return x.Seconds })
		m.OpsPerSec = median(ws, func(x WorkloadResult) float64 { return x.OpsPerSec })
		m.Latency = Latency{
			P50Ms:  median(ws, func(x WorkloadResult) float64 { return x.Latency.P50Ms }),
			P90Ms:  median(ws, func(x WorkloadResult) float64 { return x.Latency.P90Ms }),
			P99Ms:  median(ws, func(x WorkloadResult) float64 { return x.Latency.P99Ms }),
			MaxMs:  median(ws, func(x WorkloadResult) float64 { return x.Latency.MaxMs }),
			MeanMs: median(ws, func(x WorkloadResult) float64 { return x.Latency.MeanMs }),
		}
		m.ClientCores = median(ws, func(x WorkloadResult) float64 { return x.ClientCores })
		m.ServerCores = median(ws, func(x WorkloadResult) float64 { return x.ServerCores })
		m.ServerCPUPerOpMs = median(ws, func(x WorkloadResult) float64 { return x.ServerCPUPerOpMs })
		m.ServerRSSBytes = int64(median(ws, func(x WorkloadResult) float64 { return float64(x.ServerRSSBytes) }))
		out.Workloads = append(out.Workloads, m)
	}
	var servers []*ServerSummary
	for _, r := range runs {
		if r.Server != nil {
			servers = append(servers, r.Server)
		}
	}
	if len(servers) == len(runs) {
		peak := make([]float64, len(servers))
		rss := make([]float64, len(servers))
		for i, s := range servers {
			peak[i], rss[i] = float64(s.PeakRSSBytes), float64(s.RSSBytes)
		}
		out.Server = &ServerSummary{PIDs: servers[0].PIDs, PeakRSSBytes: int64(medianOf(peak)), RSSBytes: int64(medianOf(rss))}
	}
	return out
}

func median(ws []WorkloadResult, f func(WorkloadResult) float64) float64 {
	vs := make([]float64, len(ws))
	for i, w := range ws {
		vs[i] = f(w)
	}
	return medianOf(vs)
}

// medianOf is the middle value, or the mean of the two middle values.
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
