package bench

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sample is a result with every field set.
func sample() *Result {
	return &Result{
		Format: resultFormat,
		Environment: Environment{
			Tool: "trustplane v1.33.13+trustplane", ServerVersion: "v1.33.13+trustplane", TrustplaneVersion: "v1.33.13+trustplane",
			Endpoints: []string{"https://127.0.0.1:6443", "https://127.0.0.1:7443"}, Nodes: 3, Clients: 16,
			Machine: Machine{GOOS: "linux", GOARCH: "amd64", NumCPU: 2, GoVersion: "go1.26.8", Hostname: "h"},
			Start:   time.Date(2026, 11, 24, 2, 30, 0, 0, time.UTC),
			Flags:   map[string]string{"clients": "16", "duration": "10s"},
		},
		Workloads: []WorkloadResult{
			{Name: "create", Ops: 50000, Errors: 0, Seconds: 10.01, OpsPerSec: 4995.0, Latency: Latency{P50Ms: 2.5, P90Ms: 5.25, P99Ms: 12.125, MaxMs: 40, MeanMs: 3.1}, ClientCores: 0.87, Detail: "create one ConfigMap (JSON)"},
			{Name: "csr", Ops: 0, Errors: 2, Seconds: 0, ErrorSamples: []string{"preparing: no signer", "other"}},
		},
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	want := sample()
	var buf bytes.Buffer
	if err := want.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResult(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the result:\ngot  %+v\nwant %+v", got, want)
	}
}

func TestReadResultRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"not JSON", "workload ops\ncreate 1\n"},
		{"JSON without the format", `{"workloads":[]}`},
		{"another format", `{"format":"trustplane-bench/v0","workloads":[]}`},
		{"a chaos history", `[{"client":0,"kind":"put"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadResult(strings.NewReader(tc.in))
			if !errors.Is(err, ErrResultFormat) {
				t.Fatalf("error %v, want ErrResultFormat", err)
			}
		})
	}
}

func TestWorkloadLookup(t *testing.T) {
	r := sample()
	if w, ok := r.Workload("csr"); !ok || w.Errors != 2 || !w.Failed() {
		t.Fatalf("Workload(csr) = %+v, %v", w, ok)
	}
	if _, ok := r.Workload("watch"); ok {
		t.Fatal("Workload(watch) found a workload the result does not have")
	}
}
