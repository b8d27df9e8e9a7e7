package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrServerProcess: a server PID given to the run could not be read (it
// is not running, or the system has no /proc). The run refuses to start
// with it, and a workload whose samples fail records no server figures.
var ErrServerProcess = errors.New("bench: cannot read server process")

// clockTick is the unit of utime and stime in /proc/PID/stat. Linux
// reports them in USER_HZ, which is 100 on every architecture Go supports
// there (the kernel's HZ may differ; USER_HZ does not).
const clockTick = 10 * time.Millisecond

// procSample is the summed state of the server processes at one moment.
type procSample struct {
	// cpu is the user and system time the processes have used so far.
	cpu time.Duration
	// rss is their resident memory now, and hwm their peak resident
	// memory since each started (VmHWM), both in bytes.
	rss, hwm int64
	// byPID is cpu per process.
	byPID map[int]time.Duration
}

// sampleProcs reads the processes' CPU and memory from dir (/proc). The
// figures are sums over the PIDs, so kube-apiserver and etcd, or every node
// of a local cluster, count as one server.
func sampleProcs(dir string, pids []int) (procSample, error) {
	if dir == "" {
		dir = "/proc"
	}
	s := procSample{byPID: map[int]time.Duration{}}
	for _, pid := range pids {
		cpu, err := procCPU(dir, pid)
		if err != nil {
			return procSample{}, err
		}
		rss, hwm, err := procMem(dir, pid)
		if err != nil {
			return procSample{}, err
		}
		s.cpu += cpu
		s.byPID[pid] = cpu
		s.rss += rss
		s.hwm += hwm
	}
	return s, nil
}

// procCPU parses utime and stime (fields 14 and 15) of /proc/PID/stat.
// The command name (field 2) may hold spaces and parentheses, so fields
// are counted from the last ')'.
func procCPU(dir string, pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", dir, pid))
	if err != nil {
		return 0, fmt.Errorf("%w %d: %v", ErrServerProcess, pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w %d: stat has no command name", ErrServerProcess, pid)
	}
	// After ") " come fields 3 (state) onwards: utime is the 12th of them.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%w %d: stat has %d fields after the name", ErrServerProcess, pid, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%w %d: stat: %v", ErrServerProcess, pid, err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// procMem reads VmRSS and VmHWM (kB) from /proc/PID/status.
func procMem(dir string, pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("%s/%d/status", dir, pid))
	if err != nil {
		return 0, 0, fmt.Errorf("%w %d: %v", ErrServerProcess, pid, err)
	}
	defer f.Close()
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, perr := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("%w %d: status %s: %v", ErrServerProcess, pid, key, perr)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("%w %d: status: %v", ErrServerProcess, pid, err)
	}
	if found != 2 {
		// A kernel thread or a zombie has no memory lines.
		return 0, 0, fmt.Errorf("%w %d: status has no VmRSS/VmHWM (a zombie?)", ErrServerProcess, pid)
	}
	return rss, hwm, nil
}

// serverFigures fills w's server columns from the samples taken when its
// timed phase started and ended.
func serverFigures(w *WorkloadResult, before, after procSample, elapsed time.Duration) {
	cpu := after.cpu - before.cpu
	if elapsed > 0 {
		w.ServerCores = cpu.Seconds() / elapsed.Seconds()
	}
	if w.Ops > 0 {
		w.ServerCPUPerOpMs = ms(cpu) / float64(w.Ops)
		if len(after.byPID) > 1 {
			w.ServerCPUPerOpMsByPID = map[string]float64{}
			for pid, c := range after.byPID {
				w.ServerCPUPerOpMsByPID[strconv.Itoa(pid)] = ms(c-before.byPID[pid]) / float64(w.Ops)
			}
		}
	}
	w.ServerRSSBytes = after.rss
}
