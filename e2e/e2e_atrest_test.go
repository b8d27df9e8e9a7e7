package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// writeEncryptionConfig writes kube's EncryptionConfiguration for secrets
// to path: an aescbc provider with keys (name → base64 key, first first),
// then identity, so values written before encryption still read.
func writeEncryptionConfig(t testing.TB, path string, keys ...[2]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k[0], k[1])
	}
	b.WriteString("  - identity: {}\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newAESKey(t testing.TB, name string) [2]string {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return [2]string{name, base64.StdEncoding.EncodeToString(k)}
}

// secretValue is a random Secret value that is easy to search for, raw and
// base64-encoded (as JSON and YAML carry it).
func secretValue(t testing.TB) []byte {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte("tp-secret-" + hex.EncodeToString(b))
}

// storedKeyMarker is in the plaintext of every stored signing key (its
// PKCS #8 field): found in a file, the private key is there unencrypted.
var storedKeyMarker = []byte(`"pkcs8":"`)

// filesContaining lists the files under dir whose bytes contain any of needles.
func filesContaining(t testing.TB, dir string, needles ...[]byte) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, n) {
				rel, _ := filepath.Rel(dir, path)
				hits = append(hits, fmt.Sprintf("%s (%.12s...)", rel, n))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// waitSnapshot writes ConfigMaps until raft has taken a snapshot of n that
// holds index rv (raft names snapshot directories term-index-time).
func waitSnapshot(t testing.TB, n *node, cs kubernetes.Interface, rv string) {
	t.Helper()
	want, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a raft snapshot at index "+rv, func() bool {
		m, _ := filepath.Glob(filepath.Join(n.dir, "raft", "snapshots", "*", "state.bin"))
		for _, p := range m {
			parts := strings.Split(filepath.Base(filepath.Dir(p)), "-")
			if idx, err := strconv.ParseUint(parts[min(1, len(parts)-1)], 10, 64); err == nil && idx >= want {
				return true
			}
		}
		_, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "fill-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return false
	})
}

// createSecret creates default/name holding value and returns its resourceVersion.
func createSecret(t testing.TB, cs kubernetes.Interface, name string, value []byte) string {
	t.Helper()
	s, err := cs.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"v": value},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.ResourceVersion
}

func readSecret(t testing.TB, cs kubernetes.Interface, name string) []byte {
	t.Helper()
	s, err := cs.CoreV1().Secrets("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading secret %s: %v", name, err)
	}
	return s.Data["v"]
}

var snapshotArgs = []string{"--raft-snapshot-threshold", "32", "--raft-snapshot-interval", "1s"}

// TestEncryptionAtRest: with an encryption configuration, neither a
// Secret's value nor a signing key's private bytes are anywhere in the data
// directory (raft log, snapshots, log file); without one, both are (so the
// search can fail). Keys rotate by rewriting every Secret, as kube
// documents, and then the old key can be dropped from the configuration.
func TestEncryptionAtRest(t *testing.T) {
	t.Run("without a configuration the values are in the clear", func(t *testing.T) {
		n := startNode(t, snapshotArgs...)
		cs := n.clientset()
		value := secretValue(t)
		waitSnapshot(t, n, cs, createSecret(t, cs, "plain", value))
		hits := strings.Join(filesContaining(t, filepath.Join(n.dir, "raft"), value, storedKeyMarker), " ")
		if !strings.Contains(hits, ".wal") || !strings.Contains(hits, "state.bin") || !strings.Contains(hits, `"pkcs8"`) {
			t.Fatalf("the plaintext search found only %q: it cannot tell encrypted from plain", hits)
		}
	})

	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	key1, key2 := newAESKey(t, "key1"), newAESKey(t, "key2")
	writeEncryptionConfig(t, cfg, key1)
	n := startNode(t, append([]string{"--encryption-provider-config", cfg, "--log-level", "debug"}, snapshotArgs...)...)
	cs := n.clientset()
	value := secretValue(t)
	rv := createSecret(t, cs, "enc", value)
	b64 := []byte(base64.StdEncoding.EncodeToString(value))

	t.Run("secrets and signing keys are encrypted in the log, the snapshots and the log file", func(t *testing.T) {
		if got := readSecret(t, cs, "enc"); !bytes.Equal(got, value) {
			t.Fatalf("secret reads %q", got)
		}
		waitSnapshot(t, n, cs, rv)
		if hits := filesContaining(t, n.dir, value, b64, storedKeyMarker); len(hits) > 0 {
			t.Fatalf("found in the clear: %v", hits)
		}
		if hits := filesContaining(t, filepath.Join(n.dir, "raft"), []byte("k8s:enc:aescbc:v1:key1:")); len(hits) == 0 {
			t.Fatal("no value encrypted with key1 in the raft directory")
		}
		// A token still works: the node decrypts its signing key.
		makeSA(t, cs, "default", "reader")
		tok := requestToken(t, cs, "default", "reader", authenticationv1.TokenRequestSpec{}).Status.Token
		if st := review(t, cs, tok); !st.Authenticated {
			t.Fatalf("TokenReview: %+v", st)
		}
	})

	tmp := t.TempDir() // kubectl splits -f on commas, which subtest names have
	t.Run("a new first key and a rewrite re-encrypt, then the old key can go", func(t *testing.T) {
		writeEncryptionConfig(t, cfg, key2, key1)
		n.restart()
		cs := n.clientset()
		if got := readSecret(t, cs, "enc"); !bytes.Equal(got, value) {
			t.Fatalf("secret reads %q after the restart", got)
		}
		// kube's documented rewrite: kubectl get secrets -A -o json | kubectl replace -f -
		all, err := n.kubectl("get", "secrets", "-A", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		list := filepath.Join(tmp, "secrets.json")
		if err := os.WriteFile(list, []byte(all), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := n.kubectl("replace", "-f", list); err != nil {
			t.Fatalf("kubectl replace: %v\n%s", err, out)
		}
		if hits := filesContaining(t, filepath.Join(n.dir, "raft"), []byte("k8s:enc:aescbc:v1:key2:")); len(hits) == 0 {
			t.Fatal("nothing was re-encrypted with key2")
		}

		writeEncryptionConfig(t, cfg, key2)
		n.restart()
		cs = n.clientset()
		if got := readSecret(t, cs, "enc"); !bytes.Equal(got, value) {
			t.Fatalf("secret reads %q with key1 removed", got)
		}
		// The signing key was re-encrypted by the leader at its bootstrap.
		tok := requestToken(t, cs, "default", "reader", authenticationv1.TokenRequestSpec{}).Status.Token
		if st := review(t, cs, tok); !st.Authenticated {
			t.Fatalf("TokenReview with key1 removed: %+v", st)
		}
		// Every other Secret (the controllers' token Secrets) reads too.
		if _, err := n.kubectl("get", "secrets", "-A", "-o", "json"); err != nil {
			t.Fatalf("listing secrets with key1 removed: %v", err)
		}
	})

	t.Run("the data directory is private", func(t *testing.T) {
		want := map[string]fs.FileMode{".": 0o700, "pki": 0o700, "raft": 0o700, "raft/snapshots": 0o700,
			"admin.kubeconfig": 0o600, "pki/ca.key": 0o600, "pki/apiserver.key": 0o600, "pki/node.key": 0o600,
			"raft/LOCK": 0o600, "raft/wal": 0o700, "raft/wal/wal-meta.db": 0o600}
		for p, mode := range want {
			fi, err := os.Stat(filepath.Join(n.dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), mode)
			}
		}
		// The snapshots and the WAL's segments are written by raft's
		// libraries, which ask for 0644 files.
		err := filepath.WalkDir(filepath.Join(n.dir, "raft"), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: mode %v, readable by others", path, fi.Mode().Perm())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestEncryptionConfigRefused: serve refuses a KMS provider and a broken
// configuration instead of starting.
func TestEncryptionConfigRefused(t *testing.T) {
	runServe := func(t *testing.T, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args = append([]string{"serve", "--data-dir", t.TempDir(), "--listen", freePort(t), "--raft-addr", freePort(t)}, args...)
		out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
		return string(out), err
	}
	dir := t.TempDir()
	kms := filepath.Join(dir, "kms.yaml")
	os.WriteFile(kms, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - kms:\n      apiVersion: v2\n      name: k\n      endpoint: unix:///tmp/none.sock\n"), 0o600)
	short := filepath.Join(dir, "short.yaml")
	os.WriteFile(short, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n"), 0o600)
	for file, want := range map[string]string{kms: "KMS providers are not supported", short: "--encryption-provider-config"} {
		out, err := runServe(t, "--encryption-provider-config", file)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("serve with %s: %v, want a failure mentioning %q:\n%s", filepath.Base(file), err, want, out)
		}
	}
}

// TestSigningKeyRetire: after a rotation, retiring the old keys through a
// follower makes every node reject tokens they signed, in TokenReview and
// as bearer tokens, while the current key keeps working. The cluster
// runs with an encryption configuration, so every node also decrypts.
func TestSigningKeyRetire(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	writeEncryptionConfig(t, cfg, newAESKey(t, "key1"))
	nodes := startCluster(t, 3, "--encryption-provider-config", cfg)
	cs := nodes[0].clientset()
	makeSA(t, cs, "default", "retiree")
	value := secretValue(t)
	createSecret(t, cs, "shared", value)
	for _, n := range nodes {
		eventually(t, 50, func() string {
			s, err := n.clientset().CoreV1().Secrets("default").Get(context.Background(), "shared", metav1.GetOptions{ResourceVersion: "0"})
			if err != nil || !bytes.Equal(s.Data["v"], value) {
				return fmt.Sprintf("node %s reads the secret: %v", n.name, err)
			}
			return ""
		})
	}
	old := requestToken(t, cs, "default", "retiree", authenticationv1.TokenRequestSpec{}).Status.Token

	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	if r := do(t, f.httpClient(), http.MethodPost, f.url()+"/debug/trustplane/signing-keys/rotate", nil, nil); r.code != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.code, r.body)
	}
	if r := do(t, f.userHTTP(t, "operator-wannabe"), http.MethodPost, f.url()+"/debug/trustplane/signing-keys/retire", nil, nil); r.code != http.StatusForbidden {
		t.Fatalf("retire by a user outside system:masters: %d %s", r.code, r.body)
	}
	r := do(t, f.httpClient(), http.MethodPost, f.url()+"/debug/trustplane/signing-keys/retire", nil, nil)
	var retired struct {
		Kid     string   `json:"kid"`
		Retired []string `json:"retired"`
	}
	if r.code != http.StatusOK || json.Unmarshal(r.body, &retired) != nil || len(retired.Retired) != 1 || retired.Kid == "" {
		t.Fatalf("retire through a follower: %d %s", r.code, r.body)
	}
	var fresh string
	eventually(t, 50, func() string {
		fresh = requestToken(t, cs, "default", "retiree", authenticationv1.TokenRequestSpec{}).Status.Token
		if kid := tokenKid(t, fresh); kid != retired.Kid {
			return fmt.Sprintf("%s signs with %s, want %s", nodes[0].name, kid, retired.Kid)
		}
		return ""
	})
	for _, n := range nodes {
		eventually(t, 100, func() string {
			if st := review(t, n.clientset(), old); st.Authenticated {
				return fmt.Sprintf("node %s: TokenReview still accepts a token of the retired key", n.name)
			}
			tc, err := kubernetes.NewForConfig(n.tokenConfig(t, old))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tc.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
				return fmt.Sprintf("node %s: the retired key's token authenticates: %v", n.name, err)
			}
			return ""
		})
		if st := review(t, n.clientset(), fresh); !st.Authenticated {
			t.Fatalf("node %s rejects a token of the current key: %+v", n.name, st)
		}
	}
	var jwks struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	r = do(t, nodes[2].httpClient(), http.MethodGet, nodes[2].url()+"/openid/v1/jwks", nil, nil)
	if err := json.Unmarshal(r.body, &jwks); err != nil || len(jwks.Keys) != 1 || jwks.Keys[0].Kid != retired.Kid {
		t.Fatalf("jwks after retiring: %s", r.body)
	}
	// A restarted follower still counts itself bootstrapped (the first
	// key's tombstone stays) and verifies with the current key.
	f.restart()
	if st := review(t, f.clientset(), fresh); !st.Authenticated {
		t.Fatalf("restarted %s rejects a token of the current key: %+v", f.name, st)
	}
}

// tokenKid is the "kid" in a JWT's header.
func tokenKid(t testing.TB, token string) string {
	t.Helper()
	var h struct {
		Kid string `json:"kid"`
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	if err != nil || json.Unmarshal(b, &h) != nil {
		t.Fatalf("token header: %v", err)
	}
	return h.Kid
}

// TestEncryptionEverything: a secretbox rule for every resource (*.*)
// encrypts all stored objects; the watch cache, the RBAC cache (the
// controllers are authorised through it) and the signing keys all decrypt,
// also after the encryption key is rotated online and the node restarted.
// Keys (names) stay in the clear, as etcd keys do in kube.
func TestEncryptionEverything(t *testing.T) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	os.WriteFile(cfg, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: ['*.*']\n  providers:\n  - secretbox:\n      keys:\n      - name: box\n        secret: "+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
	n := startNode(t, "--encryption-provider-config", cfg) // waits for the controllers: RBAC decrypts
	cs := n.clientset()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := cs.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	value := secretValue(t)
	createSecret(t, cs, "watched", value)
	cmValue := secretValue(t)
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"v": string(cmValue)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if s, ok := ev.Object.(*corev1.Secret); ok && s.Name == "watched" {
			if !bytes.Equal(s.Data["v"], value) {
				t.Fatalf("watched secret holds %q", s.Data["v"])
			}
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("no watch event for the secret")
	}
	if hits := filesContaining(t, filepath.Join(n.dir, "raft"), value, cmValue, storedKeyMarker, []byte("system:masters")); len(hits) > 0 {
		t.Fatalf("found in the clear: %v", hits)
	}
	if hits := filesContaining(t, filepath.Join(n.dir, "raft"), []byte("k8s:enc:secretbox:v1:box:")); len(hits) == 0 {
		t.Fatal("nothing encrypted with secretbox in the raft directory")
	}

	// An encryption key rotated online moves every value, of every
	// resource, to a data key; after a restart the node still reads them
	// all (RBAC decrypts: the admin and the controllers still work).
	n.mustRotate(t, "encryption-key", "start")
	n.mustRotate(t, "encryption-key", "promote")
	waitFor(t, 60*time.Second, "the rewrite done", func() bool {
		out, err := n.rotate("encryption-key", "finish", "--force")
		return err == nil && strings.Contains(out, "[file] removed")
	})
	n.restart()
	n.waitControllers(30 * time.Second)
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	got, err := cs.CoreV1().Secrets("default").Get(rctx, "watched", metav1.GetOptions{})
	if err != nil || !bytes.Equal(got.Data["v"], value) {
		t.Fatalf("the secret after the rotation and a restart: %v", err)
	}
	if _, err := cs.RbacV1().ClusterRoles().List(rctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("RBAC after the rotation and a restart: %v", err)
	}
	if hits := filesContaining(t, filepath.Join(n.dir, "raft"), value, cmValue, storedKeyMarker, []byte("system:masters")); len(hits) > 0 {
		t.Fatalf("found in the clear after the rotation: %v", hits)
	}
}
