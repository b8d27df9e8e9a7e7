package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChaosAttach runs "trustplane chaos attach" against a cluster it did
// not start: three nodes launched by shell scripts, with the kill and
// restart commands an operator would give (here: kill -9 by pidfile, and
// the start script again). The run must find the leader, kill nodes
// through the commands, roll the cluster, and pass every checker.
func TestChaosAttach(t *testing.T) {
	if testing.Short() {
		t.Skip("a 25 s chaos run")
	}
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	if out, err := exec.Command(binPath, "certs", "init", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	const size = 3
	gossip := make([]string, size)
	for i := range gossip {
		gossip[i] = freePort(t)
	}
	var args []string
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("n%d", i+1)
		ndir := filepath.Join(dir, name)
		if err := os.MkdirAll(ndir, 0o700); err != nil {
			t.Fatal(err)
		}
		serve := []string{binPath, "serve", "--node-name", name, "--data-dir", ndir, "--ca-dir", caDir,
			"--listen", freePort(t), "--raft-addr", freePort(t), "--gossip-addr", gossip[i],
			"--bootstrap-expect", strconv.Itoa(size), "--join", strings.Join(gossip, ","), "--controllers=true"}
		pidfile := filepath.Join(dir, name+".pid")
		start := filepath.Join(dir, "start-"+name+".sh")
		script := fmt.Sprintf("#!/bin/sh\n%s >>%s 2>&1 &\necho $! >%s\n", strings.Join(serve, " "), filepath.Join(ndir, "trustplane.log"), pidfile)
		if err := os.WriteFile(start, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				// The run's report names the fault; the node's own log says why it did not come back.
				n := &node{dir: ndir}
				t.Logf("%s log (tail):\n%s", name, n.logTail())
			}
			if b, err := os.ReadFile(pidfile); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
		if out, err := exec.Command(start).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", start, err, out)
		}
		args = append(args,
			"--kubeconfig", name+"="+filepath.Join(ndir, "admin.kubeconfig"),
			"--kill", name+"=kill -9 $(cat "+pidfile+")",
			"--restart", name+"="+start)
	}
	for i := 0; i < size; i++ {
		kc := filepath.Join(dir, fmt.Sprintf("n%d", i+1), "admin.kubeconfig")
		waitFor(t, 90*time.Second, kc+" to be written", func() bool { _, err := os.Stat(kc); return err == nil })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "report")
	cmd := exec.CommandContext(ctx, binPath, append([]string{"chaos", "attach", "--duration", "25s", "--quiet", "2s",
		"--faults", "leader-kill,rolling,kill", "--out", out}, args...)...)
	b, err := cmd.CombinedOutput()
	report := string(b)
	if err != nil {
		t.Fatalf("trustplane chaos attach: %v\n%s", err, report)
	}
	for _, want := range []string{"trustplane chaos: PASS", "leader-kill", "rolling", "linearizability  ok", "watch            ok"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "history.json")); err != nil {
		t.Errorf("no history written: %v", err)
	}
}
