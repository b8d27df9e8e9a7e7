package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startCluster starts size real trustplane processes that form one cluster
// through gossip (--bootstrap-expect size, each joining through every
// node's gossip address, so a restarted node finds its peers) and waits until every node is ready. The processes are
// stopped when the test ends.
func startCluster(t testing.TB, size int, extraArgs ...string) []*node {
	t.Helper()
	skipExternal(t, size)
	caDir := t.TempDir()
	if out, err := exec.Command(binPath, "certs", "init", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	gossip := make([]string, size)
	for i := range gossip {
		gossip[i] = freePort(t)
	}
	nodes := make([]*node, size)
	for i := range nodes {
		args := append([]string{
			"--ca-dir", caDir, "--gossip-addr", gossip[i],
			"--bootstrap-expect", strconv.Itoa(size), "--join", strings.Join(gossip, ","),
		}, extraArgs...)
		nodes[i] = &node{
			t: t, name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), caDir: caDir,
			listen: freePort(t), raftAddr: freePort(t), args: args,
		}
	}
	// Start every node at the same moment: formation must still give one cluster.
	for _, n := range nodes {
		n.start()
		t.Cleanup(n.kill) // a graceful leave of every node would take seconds each
	}
	// The nodes form the cluster concurrently; waiting on them one after
	// the other keeps t.Fatal on the test goroutine.
	for _, n := range nodes {
		n.waitReady(90 * time.Second)
	}
	// The controllers' first objects (the default namespace's
	// ServiceAccount, its root CA ConfigMap) exist before the scenario
	// starts, so a watch or a count of the scenario's own never sees
	// them appear at a moment it did not choose.
	nodes[0].waitControllers(60 * time.Second)
	return nodes
}

// skipExternal skips a scenario that runs a cluster of its own when the
// suite runs against an external server (externalEnv).
func skipExternal(t testing.TB, size int) {
	t.Helper()
	if os.Getenv(externalEnv) != "" {
		t.Skipf("runs a %d-node trustplane cluster of its own; %s names an external server", size, externalEnv)
	}
}
