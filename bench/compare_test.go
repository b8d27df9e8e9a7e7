package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func result(ws ...WorkloadResult) *Result {
	return &Result{Format: resultFormat, Environment: Environment{ServerVersion: "v1", Nodes: 1, Clients: 4}, Workloads: ws}
}

func wl(name string, opsPerSec, p50, p99 float64) WorkloadResult {
	return WorkloadResult{Name: name, Ops: int64(opsPerSec * 10), OpsPerSec: opsPerSec, Latency: Latency{P50Ms: p50, P99Ms: p99}}
}

func TestRatios(t *testing.T) {
	a := result(wl("create", 1000, 4, 20), wl("get", 5000, 1, 10), wl("list", 10, 100, 400), wl("csr", 0, 0, 0))
	b := result(wl("get", 10000, 0.5, 12), wl("create", 1500, 2, 5), wl("csr", 50, 30, 60), wl("watch", 100, 1, 2))
	got := Ratios(a, b)
	want := []struct {
		name          string
		ops, p50, p99 float64
	}{
		{"create", 1.5, 0.5, 0.25},
		{"get", 2, 0.5, 1.2},
		{"csr", math.NaN(), math.NaN(), math.NaN()},
	}
	if len(got) != len(want) {
		t.Fatalf("%d ratios, want %d (workloads in both, in A's order): %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Workload != w.name || !same(g.OpsPerSec, w.ops) || !same(g.P50, w.p50) || !same(g.P99, w.p99) {
			t.Errorf("ratio %d = %s %.3f %.3f %.3f, want %s %.3f %.3f %.3f", i, g.Workload, g.OpsPerSec, g.P50, g.P99, w.name, w.ops, w.p50, w.p99)
		}
	}
}

func same(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func TestWriteCompare(t *testing.T) {
	a := result(wl("create", 1000, 4, 20), wl("list", 10, 100, 400))
	b := result(wl("create", 2000, 2, 30), wl("watch", 100, 1, 2))
	var buf bytes.Buffer
	if err := WriteCompare(&buf, "a.json", a, "b.json", b); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"A = a.json (server v1, 1 node(s), 4 client(s))",
		"B = b.json (server v1, 1 node(s), 4 client(s))",
		"ratios are B/A",
		"only in A: list",
		"only in B: watch",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	row := line(out, "create")
	if got := strings.Fields(row); len(got) != 10 ||
		got[1] != "1000" || got[2] != "2000" || got[3] != "2.00" ||
		got[4] != "4.00" || got[5] != "2.00" || got[6] != "0.50" ||
		got[7] != "20.0" || got[8] != "30.0" || got[9] != "1.50" {
		t.Fatalf("create row %q, want A/B ops/s 1000 2000 2.00, p50 4.00 2.00 0.50, p99 20.0 30.0 1.50", row)
	}
}

func TestWriteCompareSelfIsOne(t *testing.T) {
	a := sample()
	var buf bytes.Buffer
	if err := WriteCompare(&buf, "x", a, "x", a); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(line(buf.String(), "create"))
	if len(got) != 10 || got[3] != "1.00" || got[6] != "1.00" || got[9] != "1.00" {
		t.Fatalf("create row compared with itself: %q", got)
	}
	// A workload without operations has no ratio rather than a made-up one.
	if got := strings.Fields(line(buf.String(), "csr")); len(got) != 10 || got[3] != "-" || got[6] != "-" || got[9] != "-" {
		t.Fatalf("csr row compared with itself: %q", got)
	}
}

// line is the first line of out starting with word.
func line(out, word string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == word {
			return l
		}
	}
	return ""
}

func TestMedian(t *testing.T) {
	mk := func(ops, p99, cpu float64, peak int64) *Result {
		r := result(wl("create", ops, 1, p99))
		r.Workloads[0].ServerCPUPerOpMs = cpu
		r.Server = &ServerSummary{PIDs: []int{1}, PeakRSSBytes: peak}
		return r
	}
	m := Median([]*Result{mk(100, 30, 2, 300), mk(300, 10, 1, 100), mk(200, 20, 3, 200)})
	w, _ := m.Workload("create")
	if w.OpsPerSec != 200 || w.Latency.P99Ms != 20 || w.ServerCPUPerOpMs != 2 || m.Server.PeakRSSBytes != 200 {
		t.Fatalf("median %+v, server %+v: want each figure's middle value (200 ops/s, p99 20, 2 ms/op, 200 B)", w, m.Server)
	}
	even := Median([]*Result{mk(100, 10, 1, 100), mk(300, 30, 3, 300)})
	if w, _ := even.Workload("create"); w.OpsPerSec != 200 || w.Latency.P99Ms != 20 {
		t.Fatalf("median of two %+v, want the mean of the two", w)
	}
	// A run without server figures drops them from the median.
	noSrv := mk(100, 10, 1, 100)
	noSrv.Server = nil
	if got := Median([]*Result{noSrv, mk(300, 30, 3, 300)}); got.Server != nil {
		t.Fatalf("server summary %+v from runs where one has none", got.Server)
	}
	if Median(nil) != nil {
		t.Fatal("median of no runs is not nil")
	}
}
