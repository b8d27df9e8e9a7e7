package bench

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// writeProc writes a /proc/PID entry with the given stat and status text.
func writeProc(t *testing.T, dir string, pid, stat, status string) {
	t.Helper()
	d := filepath.Join(dir, pid)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	// utime 250 and stime 50 ticks: 3 s. The name holds a space and ')'.
	stat10 = "10 (kube apiserver) x) S 1 10 10 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 12 0 100 1000 200 18446744073709551615\n"
	// utime 100 and stime 100 ticks: 2 s.
	stat11   = "11 (etcd) S 1 11 11 0 -1 4194560 1 0 0 0 100 100 0 0 20 0 12 0 100 1000 200 18446744073709551615\n"
	status10 = "Name:\tkube-apiserver\nVmPeak:\t 9000 kB\nVmHWM:\t    4096 kB\nVmRSS:\t    2048 kB\nThreads:\t12\n"
	status11 = "Name:\tetcd\nVmHWM:\t1024 kB\nVmRSS:\t1024 kB\n"
)

func TestSampleProcs(t *testing.T) {
	dir := t.TempDir()
	writeProc(t, dir, "10", stat10, status10)
	writeProc(t, dir, "11", stat11, status11)
	writeProc(t, dir, "12", "12 (short) S 1\n", status11)
	writeProc(t, dir, "13", stat11, "Name:\tzombie\nState:\tZ (zombie)\n")
	writeProc(t, dir, "14", "14 (bad) S 1 14 14 0 -1 4194560 1 0 0 0 x 100 0 0 20\n", status11)
	writeProc(t, dir, "15", stat11, "VmHWM:\tlots kB\nVmRSS:\t1 kB\n")

	got, err := sampleProcs(dir, []int{10, 11})
	if err != nil {
		t.Fatal(err)
	}
	if want := (procSample{cpu: 5 * time.Second, rss: 3 << 20, hwm: 5 << 20}); got.cpu != want.cpu || got.rss != want.rss || got.hwm != want.hwm {
		t.Fatalf("sample %+v, want %+v (sums over both PIDs)", got, want)
	}
	if got.byPID[10]+got.byPID[11] != got.cpu || len(got.byPID) != 2 {
		t.Fatalf("per-process CPU %v does not add up to %v", got.byPID, got.cpu)
	}
	for _, tc := range []struct {
		name string
		pid  int
	}{
		{"no such process", 99},
		{"stat cut short", 12},
		{"no memory lines (a zombie)", 13},
		{"stat field not a number", 14},
		{"status field not a number", 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sampleProcs(dir, []int{10, tc.pid}); !errors.Is(err, ErrServerProcess) {
				t.Fatalf("err %v, want ErrServerProcess", err)
			}
		})
	}
}

// TestSampleProcsSelf reads this process from the real /proc: the parser
// must agree with the kernel's format, not only with the test's files.
func TestSampleProcsSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before, err := sampleProcs("", []int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's tick counter moves (bounded).
	x := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; {
		for i := range 1 << 20 {
			x += i
		}
		now, err := sampleProcs("", []int{os.Getpid()})
		if err != nil {
			t.Fatal(err)
		}
		if now.cpu > before.cpu {
			break
		}
	}
	after, err := sampleProcs("", []int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if after.cpu <= before.cpu || after.rss <= 0 || after.hwm < after.rss {
		t.Fatalf("before %+v, after %+v (%d): want CPU to grow, RSS > 0 and peak >= RSS", before, after, x)
	}
}

func TestServerFigures(t *testing.T) {
	w := WorkloadResult{Ops: 1000}
	serverFigures(&w, procSample{cpu: time.Second}, procSample{cpu: 3 * time.Second, rss: 7 << 20}, 4*time.Second)
	if w.ServerCores != 0.5 || w.ServerCPUPerOpMs != 2 || w.ServerRSSBytes != 7<<20 {
		t.Fatalf("%+v, want 0.5 cores, 2 ms per op, 7 MiB", w)
	}
	none := WorkloadResult{}
	serverFigures(&none, procSample{}, procSample{cpu: time.Second}, time.Second)
	if none.ServerCPUPerOpMs != 0 || none.ServerCores != 1 {
		t.Fatalf("no ops: %+v, want 1 core and no per-op figure", none)
	}
}

func TestServerPIDsValidate(t *testing.T) {
	for _, tc := range []struct {
		pids []int
		ok   bool
	}{
		{nil, true},
		{[]int{10, 11}, true},
		{[]int{0}, false},
		{[]int{-3}, false},
		{[]int{10, 10}, false},
	} {
		c := DefaultConfig()
		c.Kubeconfigs = []string{"k"}
		c.ServerPIDs = tc.pids
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("pids %v: err %v, want ok=%v", tc.pids, err, tc.ok)
		}
	}
}

func withServer(r *Result) *Result {
	r.Server = &ServerSummary{PIDs: []int{10, 11}, PeakRSSBytes: 300 << 20, RSSBytes: 200 << 20}
	for i := range r.Workloads {
		if r.Workloads[i].Ops > 0 {
			r.Workloads[i].ServerCores, r.Workloads[i].ServerCPUPerOpMs = 1.5, 0.25
		}
	}
	return r
}

func TestWriteTableServer(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, withServer(sample())); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(out, "\n")
	if got := strings.Join(strings.Fields(lines[3]), " "); got != "create 50000 4995 2.50 5.25 12.1 0 0.87 1.50 0.25" {
		t.Errorf("create row %q, want server cores and CPU per op at its end", lines[3])
	}
	for _, want := range []string{
		"SERVER CPU/OP(ms)",
		"SERVER CPU: cores the server processes [10 11] used",
		"server memory: peak RSS 300 MiB (sum of each process's peak since it started), RSS at the end 200 MiB\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteCompareServer(t *testing.T) {
	a := withServer(result(wl("list", 10, 100, 400)))
	b := withServer(result(wl("list", 20, 50, 200)))
	b.Workloads[0].ServerCPUPerOpMs = 0.1
	b.Server.PeakRSSBytes = 150 << 20
	var buf bytes.Buffer
	if err := WriteCompare(&buf, "a", a, "b", b); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if got := strings.Fields(line(out, "list")); len(got) != 13 || got[10] != "0.25" || got[11] != "0.10" || got[12] != "0.40" {
		t.Errorf("list row %q, want server CPU per op 0.25, 0.10, ratio 0.40", line(out, "list"))
	}
	if !strings.Contains(out, "server peak RSS: A 300 MiB, B 150 MiB, B/A 0.50") {
		t.Errorf("output lacks the peak RSS ratio:\n%s", out)
	}
	// Without server figures on one side the columns stay out.
	a.Server = nil
	buf.Reset()
	if err := WriteCompare(&buf, "a", a, "b", b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "SRV") || strings.Contains(buf.String(), "peak RSS") {
		t.Errorf("server columns shown though A has no server figures:\n%s", buf.String())
	}
}
