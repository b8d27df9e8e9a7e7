package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestE2ERotateEncryptionKey rotates the encryption key of a running
// three-node cluster online (issue 29), under writes, with a watch held
// open, and with the leader killed while it rewrites the stored values:
//
//   - start brings in a pending data key, sealed by the configuration
//     file's key; promote makes every node seal with it; the rewrite moves
//     every Secret and signing key to it, resumed by the next leader;
//     finish (forced past the compaction wait, which it names) drops the
//     file's key from the set;
//   - no write fails, every Secret reads back on every node, a restarted
//     node reads them, the watch sees no error, and a backup holds no
//     value sealed with anything but the new key, the record aside (the
//     only value the file's key seals), and no Secret in the clear;
//   - a second rotation aborted after promote moves the values back;
//   - each step is recorded as an Event in kube-system;
//   - only system:masters may take a step.
func TestE2ERotateEncryptionKey(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	writeEncryptionConfig(t, cfg, newAESKey(t, "key1"))
	// A slow rewrite, so the leader dies in its middle.
	nodes := startCluster(t, 3, "--encryption-provider-config", cfg, "--encryption-rewrite-rate", "20")
	ctx := context.Background()
	rotate, mustRotate := nodes[0].rotate, func(args ...string) string { t.Helper(); return nodes[0].mustRotate(t, args...) }

	values := map[string][]byte{}
	var mu sync.Mutex
	// create writes a Secret as a careful client does: a write whose
	// answer was lost (the leader it was forwarded to died: 504, "may or
	// may not have been applied") is sent again, and an AlreadyExists then
	// is a success if the stored Secret is the one sent.
	create := func(n *node, name string) error {
		v := secretValue(t)
		cs := n.clientset()
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err = cs.CoreV1().Secrets("default").Create(cctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"v": v}}, metav1.CreateOptions{})
			if attempt > 0 && apierrors.IsAlreadyExists(err) {
				var got *corev1.Secret
				if got, err = cs.CoreV1().Secrets("default").Get(cctx, name, metav1.GetOptions{}); err == nil && string(got.Data["v"]) != string(v) {
					err = fmt.Errorf("%s holds another value than the one sent", name)
				}
			}
			cancel()
			if err == nil || !(apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err)) {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if err == nil {
			mu.Lock()
			values[name] = v
			mu.Unlock()
		}
		return err
	}
	for i := 0; i < 60; i++ {
		if err := create(nodes[i%3], fmt.Sprintf("before-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if out := mustRotate("encryption-key", "status"); !regexp.MustCompile(`(?m)^file\s+active`).MatchString(out) {
		t.Fatalf("status before any rotation:\n%s", out)
	}
	// Only system:masters may take a step.
	if r := do(t, nodes[0].userHTTP(t, "someone"), http.MethodPost, nodes[0].url()+"/debug/trustplane/rotate/encryption-key/start", nil, nil); r.code != http.StatusForbidden {
		t.Fatalf("a step by someone else: %d %s", r.code, r.body)
	}

	leader := leaderOf(t, nodes)
	watched := followersOf(nodes, leader)[0]
	w, err := watched.clientset().CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	watchErrs := make(chan string, 1)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				select {
				case watchErrs <- fmt.Sprintf("%v", ev.Object):
				default:
				}
			}
		}
	}()

	// Writes through the whole rotation, to the followers, which forward
	// them to whichever node leads.
	stopWrites := writeThrough(t, followersOf(nodes, leader), 400, func(n *node, i int) error { return create(n, fmt.Sprintf("during-%03d", i)) })

	out := mustRotate("encryption-key", "start")
	if !strings.Contains(out, "is pending") {
		t.Fatalf("start:\n%s", out)
	}
	newKey := regexp.MustCompile(`key ([0-9a-f]{16}) is pending`).FindStringSubmatch(out)[1]
	waitFor(t, 30*time.Second, "every voter applied the pending key", func() bool {
		_, err := rotate("encryption-key", "promote")
		return err == nil
	})
	// Kill the leader while it rewrites (60+ values at 20 a second).
	time.Sleep(time.Second)
	if m := regexp.MustCompile(`(\d+) with file`).FindStringSubmatch(mustRotate("encryption-key", "status")); m == nil || m[1] == "0" {
		t.Fatalf("the rewrite is over before the leader's kill: %v", m)
	}
	leader.kill()
	survivor := leaderOf(t, followersOf(nodes, leader))
	leader.start()
	leader.waitReady(60 * time.Second)

	// Finish waits for the rewrite, then names the compaction wait.
	waitFor(t, 90*time.Second, "the rewrite done under the next leader", func() bool {
		out, err := survivor.rotate("encryption-key", "finish")
		return err != nil && strings.Contains(out, "--force")
	})
	if failed := stopWrites(); len(failed) > 0 {
		t.Fatalf("%d writes failed during the rotation, first: %s", len(failed), failed[0])
	}
	out = mustRotate("encryption-key", "finish", "--force")
	if !strings.Contains(out, "[file] removed") || !regexp.MustCompile(`(?m)^`+newKey+`\s+active`).MatchString(out) {
		t.Fatalf("finish:\n%s", out)
	}
	// The leader's metrics: the rewrite has nothing left, one active key.
	waitFor(t, 30*time.Second, "the rewrite's metrics on the leader", func() bool {
		r := do(t, leaderOf(t, nodes).httpClient(), http.MethodGet, leaderOf(t, nodes).url()+"/metrics", nil, nil)
		body := string(r.body)
		return strings.Contains(body, "trustplane_encryption_rewrite_stale_values 0") &&
			strings.Contains(body, `trustplane_trust_root_keys{phase="active",root="encryption-key"} 1`) &&
			strings.Contains(body, `trustplane_trust_root_keys{phase="retiring",root="encryption-key"} 0`)
	})
	// Each step is an Event in kube-system, a refusal a Warning.
	waitFor(t, 30*time.Second, "an Event per step", func() bool {
		evs, err := nodes[0].clientset().EventsV1().Events("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if ev.ReportingController == "trustplane.io/rotation" && strings.HasPrefix(ev.Note, "encryption-key ") {
				seen[ev.Type+" "+ev.Reason] = true
			}
		}
		return seen["Normal RotationStarted"] && seen["Normal RotationPromoted"] && seen["Normal RotationFinished"] && seen["Warning RotationRefused"]
	})
	select {
	case e := <-watchErrs:
		t.Fatalf("the watch saw an error: %s", e)
	default:
	}

	// Every Secret reads back on every node, a restarted one included.
	readAll := func(step string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, n := range nodes {
			list, err := n.clientset().CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("%s: list on %s: %v", step, n.name, err)
			}
			got := map[string]string{}
			for _, s := range list.Items {
				got[s.Name] = string(s.Data["v"])
			}
			for name, v := range values {
				if got[name] != string(v) {
					t.Fatalf("%s: %s on %s reads %q, want %q", step, name, n.name, got[name], v)
				}
			}
		}
	}
	readAll("after finish")
	restarted := followersOf(nodes, leaderOf(t, nodes))[1]
	restarted.stop()
	restarted.start()
	restarted.waitReady(60 * time.Second)
	readAll("after a restart")

	// A backup: every encrypted value but the record is sealed with the
	// new key; no Secret is in the clear anywhere.
	file := filepath.Join(t.TempDir(), "backup.db")
	runTrustplane(t, "snapshot", "save", "--kubeconfig", nodes[0].kubeconfigPath(), "-o", file)
	inspect := runTrustplane(t, "snapshot", "inspect", file)
	enc := regexp.MustCompile(`encrypted at rest:\s+(\d+) values with (\S+)`).FindAllStringSubmatch(inspect, -1)
	sealedBy := map[string]string{}
	for _, m := range enc {
		sealedBy[m[2]] = m[1]
	}
	if len(sealedBy) != 2 || sealedBy["k8s:enc:aescbc:v1:key1"] != "1" || sealedBy["k8s:enc:trustplane:v1:"+newKey] == "" {
		t.Fatalf("the backup's encrypted values: %v\n%s", sealedBy, inspect)
	}
	mu.Lock()
	var needles [][]byte
	for _, v := range values {
		needles = append(needles, v)
	}
	mu.Unlock()
	for _, n := range nodes {
		if hits := filesContaining(t, n.dir, needles...); len(hits) > 0 {
			t.Fatalf("a Secret is in the clear in %v", hits)
		}
	}

	// A second rotation, aborted after promote: the values move back.
	second := regexp.MustCompile(`key ([0-9a-f]{16}) is pending`).FindStringSubmatch(mustRotate("encryption-key", "start"))[1]
	waitFor(t, 30*time.Second, "every voter applied the second key", func() bool {
		_, err := rotate("encryption-key", "promote")
		return err == nil
	})
	if out := mustRotate("encryption-key", "abort"); !strings.Contains(out, newKey+" is active again") {
		t.Fatalf("abort:\n%s", out)
	}
	waitFor(t, 90*time.Second, "the values moved back", func() bool {
		out, err := rotate("encryption-key", "finish", "--force")
		return err == nil && strings.Contains(out, "["+second+"] removed")
	})
	readAll("after the aborted rotation")
}
