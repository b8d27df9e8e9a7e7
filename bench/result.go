package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// resultFormat names the JSON layout, so that compare can refuse a file
// that is something else.
const resultFormat = "trustplane-bench/v1"

// Result is everything one run measured, with what it ran against.
type Result struct {
	Format      string           `json:"format"`
	Environment Environment      `json:"environment"`
	Workloads   []WorkloadResult `json:"workloads"`
	// Server is the server processes' memory, when their PIDs were given.
	Server *ServerSummary `json:"server,omitempty"`
}

// ServerSummary is what the server processes held, summed over their PIDs.
type ServerSummary struct {
	PIDs []int `json:"pids"`
	// PeakRSSBytes is the sum of each process's peak resident memory since
	// it started (VmHWM), read at the end of the run before cleanup: start
	// the servers fresh for a comparison. RSSBytes is the resident memory
	// at that moment.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	RSSBytes     int64 `json:"rssBytes"`
}

// Environment is what a reader needs to judge the figures.
type Environment struct {
	// Tool is the version of the binary that ran the bench.
	Tool string `json:"tool"`
	// ServerVersion is /version's gitVersion of the first endpoint;
	// TrustplaneVersion is the same when the server is trustplane, else "".
	ServerVersion     string `json:"serverVersion"`
	TrustplaneVersion string `json:"trustplaneVersion,omitempty"`
	// Endpoints are the distinct API servers the clients used.
	Endpoints []string `json:"endpoints"`
	// Nodes is the cluster's member count when the server reports it
	// (trustplane does), else the number of endpoints.
	Nodes   int     `json:"nodes"`
	Clients int     `json:"clients"`
	Machine Machine `json:"machine"`
	// Start is when the run began (UTC).
	Start time.Time `json:"start"`
	// Flags are the flags the run was given.
	Flags map[string]string `json:"flags,omitempty"`
}

// Machine is where the bench's clients ran.
type Machine struct {
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	NumCPU    int    `json:"numCPU"`
	GoVersion string `json:"goVersion"`
	Hostname  string `json:"hostname,omitempty"`
}

// WorkloadResult is one workload's figures. Ops counts successful
// operations only; OpsPerSec and Latency are computed from them.
type WorkloadResult struct {
	Name      string  `json:"name"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"opsPerSec"`
	Latency   Latency `json:"latency"`
	// ClientCores is the CPU the bench process itself used while the
	// workload ran, in cores (CPU seconds per second): what the clients
	// took from a machine they may share with the servers. 0: unknown.
	ClientCores float64 `json:"clientCores"`
	// ServerCores is the CPU the server processes used while the workload
	// ran, in cores, ServerCPUPerOpMs that CPU per successful operation,
	// and ServerRSSBytes their resident memory at its end; all 0 when no
	// server PIDs were given (or they could not be read).
	ServerCores      float64 `json:"serverCores,omitempty"`
	ServerCPUPerOpMs float64 `json:"serverCPUPerOpMs,omitempty"`
	ServerRSSBytes   int64   `json:"serverRSSBytes,omitempty"`
	// ServerCPUPerOpMsByPID splits ServerCPUPerOpMs by process when the
	// run was given several (the nodes of a local cluster): which node
	// paid for the work.
	ServerCPUPerOpMsByPID map[string]float64 `json:"serverCPUPerOpMsByPID,omitempty"`
	// Detail says what one operation is, in this run's terms.
	Detail       string   `json:"detail,omitempty"`
	ErrorSamples []string `json:"errorSamples,omitempty"`
}

// Failed reports whether the workload had no successful operation.
func (w WorkloadResult) Failed() bool { return w.Ops == 0 }

// Latency is a latency summary in milliseconds.
type Latency struct {
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`
}

// Workload returns the named workload's result, if the run has one.
func (r *Result) Workload(name string) (WorkloadResult, bool) {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return WorkloadResult{}, false
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadResult reads a result written by WriteJSON.
func ReadResult(rd io.Reader) (*Result, error) {
	var r Result
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrResultFormat, err)
	}
	if r.Format != resultFormat {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrResultFormat, r.Format, resultFormat)
	}
	return &r, nil
}
