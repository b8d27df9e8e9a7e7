package e2e_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRedteamE2ERestartAfterPromote (docs/REDTEAM-encryption-keys.md RT-1): a node restarted
// from a Raft snapshot that holds the promote step, before any value was
// sealed with the promoted key, runs with no key set: the store subscribes
// to the fsm after raft.NewRaft restored the snapshot, so it never loads
// the record. As the leader, its rewrite pass takes the file's keys for
// the active one, records the rewrite as done, and never runs again:
// every value stays sealed with the retiring key, finish is refused for
// ever ("the leader is rewriting them"), and new Secrets are sealed with
// the file's key although the data key is active.
func TestRedteamE2ERestartAfterPromote(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	writeEncryptionConfig(t, cfg, newAESKey(t, "key1"))
	n := startNode(t, "--encryption-provider-config", cfg,
		"--raft-snapshot-threshold", "1", "--raft-snapshot-interval", "50ms")
	cs := n.clientset()
	for i := 0; i < 5; i++ {
		createSecret(t, cs, fmt.Sprintf("s%d", i), secretValue(t))
	}
	n.mustRotate(t, "encryption-key", "start")
	n.mustRotate(t, "encryption-key", "promote")
	// With the status call, long enough for a snapshot (50-100 ms), and
	// usually shorter than the rewrite's next tick (each second).
	time.Sleep(100 * time.Millisecond)
	before := n.mustRotate(t, "encryption-key", "status")
	n.kill()
	t.Logf("before the kill:\n%s", before)
	snaps, _ := filepath.Glob(filepath.Join(n.dir, "raft", "snapshots", "*"))
	t.Logf("snapshots: %v", snaps)
	n.start()
	n.waitReady(60 * time.Second)

	withFile := regexp.MustCompile(`(\d+) with file`)
	out := n.mustRotate(t, "encryption-key", "status")
	if withFile.FindStringSubmatch(out) == nil {
		t.Skipf("timing: the rewrite ran before the kill; nothing to show\n%s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		out = n.mustRotate(t, "encryption-key", "status")
		if withFile.FindStringSubmatch(out) == nil {
			return // the rewrite moved everything: not affected
		}
		time.Sleep(500 * time.Millisecond)
	}
	fin, _ := n.rotate("encryption-key", "finish", "--force")
	if strings.Contains(out, "rewrite done") {
		t.Fatalf("the rewrite is recorded done while values are still sealed with the retiring file key, and no pass runs again:\n%s\nfinish --force:\n%s", out, fin)
	}
	t.Fatalf("values still sealed with the retiring file key 20 s after the restart:\n%s\nfinish --force:\n%s", out, fin)
}
