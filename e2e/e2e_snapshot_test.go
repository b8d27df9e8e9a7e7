package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/api"
)

// TestSnapshotSaveRestore: `trustplane snapshot save` from a follower of
// a three-node cluster, `inspect`, and `restore` into a new node that two
// empty nodes then join. The new cluster holds every saved object at its
// original resourceVersion and nothing written after the save; a new
// write's resourceVersion is above every restored one; a watch from a
// restored resourceVersion replays what followed it; a token issued before
// the save verifies (the signing keys are carried); a follower serves the
// data. Refused: a non-admin caller (403), query parameters (400), a
// restore into a used data directory (which stays as it was), and a
// corrupt or truncated file.
func TestSnapshotSaveRestore(t *testing.T) {
	src := startCluster(t, 3)
	leader := leaderOf(t, src)
	follower := followersOf(src, leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Objects before the save, with their resourceVersions.
	cs := leader.clientset()
	const ns = "snap"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	saved := map[string]string{} // configmap name -> resourceVersion
	for i := range 5 {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"v": "saved"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		saved[cm.Name] = cm.ResourceVersion
	}
	secret, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"k": "secret"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "robot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Hostile callers first: nothing is streamed to them.
	bob, err := rest.TransportFor(follower.userConfig(t, "bob", "developers"))
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, &http.Client{Transport: bob, Timeout: 10 * time.Second}, http.MethodGet, follower.url()+"/debug/trustplane/snapshot", nil, nil)
	wantStatus(t, r, http.StatusForbidden, metav1.StatusReasonForbidden, "")
	r = do(t, follower.httpClient(), http.MethodGet, follower.url()+"/debug/trustplane/snapshot?resourceVersion=5", nil, nil)
	wantStatus(t, r, http.StatusBadRequest, metav1.StatusReasonBadRequest, "/debug/trustplane/snapshot takes no query parameters*")

	// Save from a follower: it waits for a read index, so it holds every
	// write acknowledged above, all of which went to the leader.
	dir := t.TempDir()
	file := filepath.Join(dir, "backup.snap")
	out := runTrustplane(t, "snapshot", "save", "--kubeconfig", follower.kubeconfigPath(), "-o", file)
	if !strings.Contains(out, "by node "+follower.name) {
		t.Fatalf("save was not served by %s:\n%s", follower.name, out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v %v, want mode 0600", fi, err)
	}
	if out, err := exec.Command(binPath, "snapshot", "save", "--kubeconfig", follower.kubeconfigPath(), "-o", file).CombinedOutput(); err == nil {
		t.Fatalf("save over an existing file succeeded:\n%s", out)
	}

	// Writes after the save.
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-save"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm0, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "cm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm0.Data["v"] = "after"
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	out = runTrustplane(t, "snapshot", "inspect", file)
	index, term := inspectField(t, out, "index"), inspectField(t, out, "term")
	maxSaved := uint64(0)
	for _, rv := range append(mapValues(saved), secret.ResourceVersion, sa.ResourceVersion) {
		v, _ := strconv.ParseUint(rv, 10, 64)
		maxSaved = max(maxSaved, v)
	}
	if index < maxSaved {
		t.Fatalf("snapshot index %d is below the acknowledged write at %d:\n%s", index, maxSaved, out)
	}
	if !regexp.MustCompile(`(?m)^configmaps\s+\d+$`).MatchString(out) || !regexp.MustCompile(`(?m)^secrets\s+\d+$`).MatchString(out) {
		t.Fatalf("inspect lists no object counts:\n%s", out)
	}

	caDir := src[0].caDir
	for _, n := range src {
		n.kill()
	}

	// Restore is refused into a used data directory, which it leaves as it was.
	before := dirTree(t, leader.dir)
	if out, err := exec.Command(binPath, "snapshot", "restore", "--file", file, "--data-dir", leader.dir, "--node-name", "r1", "--raft-addr", freePort(t)).CombinedOutput(); err == nil || !strings.Contains(string(out), "already holds raft state") {
		t.Fatalf("restore into a used data dir: %v\n%s", err, out)
	}
	if after := dirTree(t, leader.dir); after != before {
		t.Fatalf("the refused restore changed the data dir:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A damaged file is refused before anything is written.
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"flipped":   {flipped, "checksum mismatch"},
		"truncated": {good[:len(good)*2/3], "truncated"},
	} {
		bad := filepath.Join(dir, name+".snap")
		if err := os.WriteFile(bad, tc.b, 0o600); err != nil {
			t.Fatal(err)
		}
		target := t.TempDir()
		out, err := exec.Command(binPath, "snapshot", "restore", "--file", bad, "--data-dir", target, "--node-name", "r1", "--raft-addr", freePort(t)).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Fatalf("restore of a %s file: %v\n%s", name, err, out)
		}
		if entries, _ := os.ReadDir(target); len(entries) != 0 {
			t.Fatalf("restore of a %s file wrote %v", name, entries)
		}
	}

	// The new cluster: r1 from the snapshot, r2 and r3 empty, joining it.
	gossip := []string{freePort(t), freePort(t), freePort(t)}
	restored := make([]*node, 3)
	for i := range restored {
		restored[i] = &node{
			t: t, name: fmt.Sprintf("r%d", i+1), dir: t.TempDir(), caDir: caDir,
			listen: freePort(t), raftAddr: freePort(t),
			args: []string{"--ca-dir", caDir, "--gossip-addr", gossip[i], "--join", strings.Join(gossip, ",")},
		}
	}
	r1 := restored[0]
	runTrustplane(t, "snapshot", "restore", "--file", file, "--data-dir", r1.dir, "--node-name", r1.name, "--raft-addr", r1.raftAddr)
	for _, n := range restored {
		n.start()
		t.Cleanup(n.kill)
	}
	for _, n := range restored {
		n.waitReady(90 * time.Second)
	}
	waitMembers(t, r1, "r2 and r3 added as voters", func(ms []api.Member) bool {
		voters := 0
		for _, m := range ms {
			if m.Voter {
				voters++
			}
		}
		return voters == 3
	})

	for _, n := range restored[:2] { // the restored leader and a follower that got the snapshot
		c := n.clientset().CoreV1()
		for name, rv := range saved {
			cm, err := c.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: %s: %v", n.name, name, err)
			}
			if cm.ResourceVersion != rv || cm.Data["v"] != "saved" {
				t.Fatalf("%s: %s at resourceVersion %s with %v, want %s as saved", n.name, name, cm.ResourceVersion, cm.Data, rv)
			}
		}
		s, err := c.Secrets(ns).Get(ctx, "s", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: secret: %v", n.name, err)
		}
		if s.ResourceVersion != secret.ResourceVersion || string(s.Data["k"]) != "secret" {
			t.Fatalf("%s: secret at resourceVersion %s, want %s as saved", n.name, s.ResourceVersion, secret.ResourceVersion)
		}
		if _, err := c.ConfigMaps(ns).Get(ctx, "after-save", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("%s: a configmap written after the save: %v, want 404", n.name, err)
		}
	}

	// The signing keys came along: the old token verifies on the new cluster.
	rev, err := restored[1].clientset().AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok.Status.Token}}, metav1.CreateOptions{})
	if err != nil || !rev.Status.Authenticated || rev.Status.User.UID != string(sa.UID) {
		t.Fatalf("token issued before the save: %+v %v", rev, err)
	}

	// A new write, through a follower, lands above everything restored.
	fresh, err := restored[2].clientset().CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := strconv.ParseUint(fresh.ResourceVersion, 10, 64); v <= index {
		t.Fatalf("new write at resourceVersion %d, not above the snapshot's index %d", v, index)
	}
	if st := raftStatusOf(t, r1); st.Term <= term {
		t.Fatalf("restored leader in term %d, not above the snapshot's %d", st.Term, term)
	}

	// A watch from a restored resourceVersion, on a follower, replays what
	// followed it in order and then the new write.
	w, err := restored[1].clientset().CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: saved["cm-1"]})
	if err != nil {
		t.Fatalf("watch from restored resourceVersion %s: %v", saved["cm-1"], err)
	}
	defer w.Stop()
	want := []string{"cm-2=" + saved["cm-2"], "cm-3=" + saved["cm-3"], "cm-4=" + saved["cm-4"], "fresh=" + fresh.ResourceVersion}
	var got []string
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after %v", got)
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if isCM && cm.Name == "kube-root-ca.crt" {
				continue // the controller's, created with the namespace
			}
			if ev.Type != watch.Added || !isCM {
				t.Fatalf("watch event %s %T after %v", ev.Type, ev.Object, got)
			}
			got = append(got, cm.Name+"="+cm.ResourceVersion)
		case <-timeout:
			t.Fatalf("watch delivered %v, want %v", got, want)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("watch delivered %v, want %v", got, want)
	}
}

// runTrustplane runs the binary and fails the test on error.
func runTrustplane(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binPath, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("trustplane %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// inspectField reads "name: N" from snapshot inspect's output.
func inspectField(t *testing.T, out, name string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `:\s+(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s in:\n%s", name, out)
	}
	v, _ := strconv.ParseUint(m[1], 10, 64)
	return v
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// dirTree describes every file under dir (path, size, mode, modification
// time), to show that something left it alone.
func dirTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %v %d\n", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// raftStatusOf reads n's GET /debug/trustplane/raft.
func raftStatusOf(t *testing.T, n *node) api.RaftStatus {
	t.Helper()
	var st api.RaftStatus
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/debug/trustplane/raft", nil, nil)
	if r.code != http.StatusOK {
		t.Fatalf("%s: raft status: %d %s", n.name, r.code, r.body)
	}
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSnapshotEncryptedAtRest: a one-node cluster that encrypts Secrets
// and signing keys at rest. The backup holds them as stored (neither the
// Secret's value nor a private key is in the file in the clear), inspect
// and restore name the key the new node needs, and a node restored with
// the same encryption configuration (and the same CA, without gossip)
// reads the Secret at its resourceVersion and verifies a token issued
// before the save.
func TestSnapshotEncryptedAtRest(t *testing.T) {
	encCfg := filepath.Join(t.TempDir(), "encryption.yaml")
	writeEncryptionConfig(t, encCfg, newAESKey(t, "key1"))
	src := startNode(t, "--encryption-provider-config", encCfg)
	cs := src.clientset()
	val := secretValue(t)
	rv := createSecret(t, cs, "enc", val)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "enc.snap")
	runTrustplane(t, "snapshot", "save", "--kubeconfig", src.kubeconfigPath(), "-o", file)
	if hits := filesContaining(t, dir, val, []byte(base64.StdEncoding.EncodeToString(val)), storedKeyMarker); len(hits) > 0 {
		t.Fatalf("the backup holds plaintext: %v", hits)
	}
	if out := runTrustplane(t, "snapshot", "inspect", file); !strings.Contains(out, "values with k8s:enc:aescbc:v1:key1") {
		t.Fatalf("inspect does not name the encryption key:\n%s", out)
	}
	src.kill()

	r := &node{
		t: t, name: "r1", dir: t.TempDir(), caDir: filepath.Join(src.dir, "pki"),
		listen: freePort(t), raftAddr: freePort(t),
		args: []string{"--ca-dir", filepath.Join(src.dir, "pki"), "--encryption-provider-config", encCfg},
	}
	out := runTrustplane(t, "snapshot", "restore", "--file", file, "--data-dir", r.dir, "--node-name", r.name, "--raft-addr", r.raftAddr)
	if !strings.Contains(out, "encrypted at rest with k8s:enc:aescbc:v1:key1") {
		t.Fatalf("restore does not say which key the node needs:\n%s", out)
	}
	r.start()
	t.Cleanup(r.kill)
	r.waitReady(60 * time.Second)
	rcs := r.clientset()
	s, err := rcs.CoreV1().Secrets("default").Get(ctx, "enc", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("restored secret: %v", err)
	}
	if s.ResourceVersion != rv || !bytes.Equal(s.Data["v"], val) {
		t.Fatalf("restored secret at resourceVersion %s (want %s), value as saved: %v", s.ResourceVersion, rv, bytes.Equal(s.Data["v"], val))
	}
	rev, err := rcs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok.Status.Token}}, metav1.CreateOptions{})
	if err != nil || !rev.Status.Authenticated {
		t.Fatalf("token issued before the save: %+v %v", rev, err)
	}
}
