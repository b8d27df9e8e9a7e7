package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes r for people: one line about the environment, a table
// (workload, ops, ops/s, p50, p90, p99, errors; latencies in
// milliseconds; then the cores the bench itself used), what one operation
// is per workload, and the first error messages of each workload that had
// errors.
func WriteTable(w io.Writer, r *Result) error {
	e := r.Environment
	server := e.ServerVersion
	if server == "" {
		server = "unknown"
	}
	fmt.Fprintf(w, "server %s, %d node(s), %d endpoint(s), %d client(s); client machine %s/%s, %d CPU\n\n",
		server, e.Nodes, len(e.Endpoints), e.Clients, e.Machine.GOOS, e.Machine.GOARCH, e.Machine.NumCPU)
	srv := r.Server != nil
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "WORKLOAD\tOPS\tOPS/S\tP50(ms)\tP90(ms)\tP99(ms)\tERRORS\tBENCH CPU\t"
	if srv {
		head += "SERVER CPU\tSERVER CPU/OP(ms)\t"
	}
	fmt.Fprintln(tw, head)
	for _, x := range r.Workloads {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t", x.Name, x.Ops, rate(x.OpsPerSec),
			millis(x.Latency.P50Ms), millis(x.Latency.P90Ms), millis(x.Latency.P99Ms), x.Errors, cores(x.ClientCores))
		if srv {
			fmt.Fprintf(tw, "%s\t%s\t", cores(x.ServerCores), millis(x.ServerCPUPerOpMs))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nBENCH CPU: cores the bench's own clients used (of %d on its machine)\n", e.Machine.NumCPU)
	if srv {
		fmt.Fprintf(w, "SERVER CPU: cores the server processes %v used; per op: CPU milliseconds per successful operation\n", r.Server.PIDs)
		fmt.Fprintf(w, "server memory: peak RSS %s (sum of each process's peak since it started), RSS at the end %s\n", mib(r.Server.PeakRSSBytes), mib(r.Server.RSSBytes))
	}
	for _, x := range r.Workloads {
		if len(x.ServerCPUPerOpMsByPID) == 0 {
			continue
		}
		var parts []string
		for _, pid := range r.Server.PIDs {
			parts = append(parts, fmt.Sprintf("%d %s", pid, millis(x.ServerCPUPerOpMsByPID[strconv.Itoa(pid)])))
		}
		fmt.Fprintf(w, "  %s: CPU/op (ms) by process: %s\n", x.Name, strings.Join(parts, ", "))
	}
	var notes []string
	for _, x := range r.Workloads {
		if x.Detail != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", x.Name, x.Detail))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\none operation is:\n%s\n", strings.Join(notes, "\n"))
	}
	for _, x := range r.Workloads {
		if x.Errors == 0 {
			continue
		}
		state := "errors"
		if x.Failed() {
			state = "FAILED"
		}
		fmt.Fprintf(w, "\n%s %s (%d), first messages:\n", x.Name, state, x.Errors)
		for _, m := range x.ErrorSamples {
			fmt.Fprintf(w, "  - %s\n", m)
		}
	}
	return nil
}

// cores formats CPU use in cores; "-" when unknown.
func cores(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// rate formats operations per second.
func rate(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// millis formats a latency in milliseconds with three significant digits
// or so; "-" when there is none.
func millis(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
