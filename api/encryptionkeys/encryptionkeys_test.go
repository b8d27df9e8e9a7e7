package encryptionkeys

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
)

// fileTransformers loads kube's EncryptionConfiguration with an aescbc
// provider for secrets (keys: name → byte, the first first), then
// identity; other resources are not encrypted.
func fileTransformers(t testing.TB, keys ...[2]string) value.ResourceTransformers {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n")
	if len(keys) > 0 {
		b.WriteString("  - aescbc:\n      keys:\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k[0], base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(k[1]), 32)))
		}
	}
	b.WriteString("  - identity: {}\n")
	path := filepath.Join(t.TempDir(), "enc.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := encryptionconfig.LoadEncryptionConfig(context.Background(), path, false, "")
	if err != nil {
		t.Fatal(err)
	}
	return encryptionconfig.StaticTransformers(loaded.Transformers)
}

// env is a node: the real fsm behind a one-voter log, the store
// subscribed to it, and the storage layer's transformations over it.
type env struct {
	t    testing.TB
	log  *memlog.Log
	s    *Store
	stor *storage.Storage
}

func newEnv(t testing.TB, file value.ResourceTransformers) *env {
	return newEnvOn(t, memlog.New(), file)
}

func newEnvOn(t testing.TB, log *memlog.Log, file value.ResourceTransformers) *env {
	e := &env{t: t, log: log}
	e.s = New(Config{
		Backend: log, File: file,
		Members: func(context.Context) (map[string]uint64, error) {
			i := log.AppliedIndex()
			return map[string]uint64{"n1": i, "n2": i}, nil
		},
		Now: func() time.Time { return time.Unix(1000, 0) },
	})
	cancel := log.FSM.Subscribe(e.s)
	t.Cleanup(cancel)
	stor, err := storage.New(&storage.Config{Transformers: e.s.Transformers(), SealedInternal: []string{"signingkeys"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stor.Close)
	e.stor = stor
	return e
}

func (e *env) root() rotation.Root { return e.s.Root(e.log.FSM.Export, e.stor.AtRestOf) }

func (e *env) step(step rotation.Step, o rotation.Options) (*rotation.Status, error) {
	return rotation.Run(context.Background(), e.root(), step, o)
}

func (e *env) mustStep(step rotation.Step, o rotation.Options) *rotation.Status {
	e.t.Helper()
	st, err := e.step(step, o)
	if err != nil {
		e.t.Fatalf("%s: %v", step, err)
	}
	return st
}

var (
	secretKey   = func(n int) fsm.Key { return fsm.Key{Resource: "secrets", Namespace: "ns", Name: fmt.Sprintf("s%d", n)} }
	configKey   = fsm.Key{Resource: "configmaps", Namespace: "ns", Name: "cm"}
	internalKey = fsm.Key{Space: fsm.SpaceInternal, Resource: "signingkeys", Name: "k"}
)

// put stores plain at key, sealed as the storage layer seals it.
func (e *env) put(key fsm.Key, plain string) {
	e.t.Helper()
	val, err := e.stor.AtRestOf(key).Seal(key, []byte(plain))
	if err != nil {
		e.t.Fatal(err)
	}
	if res, err := e.log.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: key, Value: val, UID: "u-" + key.Name}); err != nil || res.Err != nil {
		e.t.Fatalf("put %s: %v %v", key, err, res.Err)
	}
}

// get opens the value at key.
func (e *env) get(key fsm.Key) (plain string, sealedWith string, err error) {
	kv, _, err := e.log.Get(key, 0)
	if err != nil || kv == nil {
		return "", "", fmt.Errorf("get %s: %v (absent: %v)", key, err, kv == nil)
	}
	out, err := e.stor.Open(kv)
	return string(out), SealedWith(kv.Value), err
}

// rewriteAll runs the leader's rewrite passes until it records a revision.
func (e *env) rewriteAll() {
	e.t.Helper()
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: e.stor.AtRestOf, IsLeader: func() bool { return true }}
	lim := rate.NewLimiter(rate.Inf, 1)
	for i := 0; i < 10; i++ {
		if err := e.s.rewritePass(context.Background(), rc, lim); err != nil {
			e.t.Fatalf("rewrite: %v", err)
		}
		rec, _, err := e.s.read()
		if err != nil {
			e.t.Fatal(err)
		}
		if rec != nil && rec.Rewritten != 0 {
			return
		}
	}
	e.t.Fatal("the rewrite did not finish in 10 passes")
}

// check opens every value and says which key seals each.
func (e *env) check(n int, wantSecret, wantInternal string) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		got, with, err := e.get(secretKey(i))
		if err != nil || got != fmt.Sprintf("secret %d", i) || with != wantSecret {
			e.t.Fatalf("secret %d: %q sealed with %q, %v; want sealed with %q", i, got, with, err, wantSecret)
		}
	}
	if got, with, err := e.get(internalKey); err != nil || got != "private" || with != wantInternal {
		e.t.Fatalf("internal record: %q sealed with %q, %v; want %q", got, with, err, wantInternal)
	}
	if got, with, err := e.get(configKey); err != nil || got != "plain" || with != "" {
		e.t.Fatalf("configmap: %q sealed with %q, %v; want it left in the clear", got, with, err)
	}
}

func activeKey(st *rotation.Status) string {
	for _, k := range st.Keys {
		if k.Phase == rotation.Active {
			return k.ID
		}
	}
	return ""
}

func TestEncryptionKeyRotation(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	const n = 20
	for i := 0; i < n; i++ {
		e.put(secretKey(i), fmt.Sprintf("secret %d", i))
	}
	e.put(internalKey, "private")
	e.put(configKey, "plain")
	e.check(n, FileKey, FileKey)

	st := e.mustStep(rotation.StepStatus, rotation.Options{})
	if activeKey(st) != FileKey || st.Next != "" || !strings.Contains(st.Progress, fmt.Sprintf("%d with file", n+1)) {
		t.Fatalf("status before any rotation: %+v", st)
	}
	if _, err := e.step(rotation.StepAbort, rotation.Options{}); !errors.Is(err, rotation.ErrNoRotation) {
		t.Fatalf("abort with nothing to abort: %v", err)
	}
	if _, err := e.step(rotation.StepStart, rotation.Options{Key: bytes.Repeat([]byte{1}, 32)}); !errors.Is(err, rotation.ErrNotReady) {
		t.Fatalf("start with the operator's key: %v", err)
	}

	// start: a pending key opens values, seals none.
	st = e.mustStep(rotation.StepStart, rotation.Options{})
	pending := st.Keys[0].ID
	if st.Keys[0].Phase != rotation.Pending || st.Next != rotation.StepPromote || activeKey(st) != FileKey {
		t.Fatalf("after start: %+v", st)
	}
	if again := e.mustStep(rotation.StepStart, rotation.Options{}); again.Keys[0].ID != pending || len(again.Keys) != 2 {
		t.Fatalf("start again is not idempotent: %+v", again)
	}
	e.put(secretKey(n), "late")
	if _, with, _ := e.get(secretKey(n)); with != FileKey {
		t.Fatalf("a write after start is sealed with %q, want the file's keys", with)
	}
	// The record is sealed by the file's keys, and holds the key's bytes
	// only there.
	kv, _, _ := e.log.Get(recordKey, 0)
	if !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("the record is not sealed by the file: %.40q", kv.Value)
	}
	rec, _, err := e.s.read()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(kv.Value, rec.Keys[0].Key) || strings.Contains(fmt.Sprint(st), string(rec.Keys[0].Key)) {
		t.Fatal("a data key appears outside its sealed record")
	}

	// promote: new values are sealed with it; finish waits for the rewrite.
	st = e.mustStep(rotation.StepPromote, rotation.Options{})
	if activeKey(st) != pending || st.Next != rotation.StepFinish {
		t.Fatalf("after promote: %+v", st)
	}
	e.put(secretKey(n+1), "after promote")
	if _, with, _ := e.get(secretKey(n + 1)); with != pending {
		t.Fatalf("a write after promote is sealed with %q, want %s", with, pending)
	}
	if _, err := e.step(rotation.StepFinish, rotation.Options{Force: true}); !errors.Is(err, rotation.ErrNotReady) {
		t.Fatalf("finish, even forced, before the rewrite: %v", err)
	}
	e.rewriteAll()
	e.check(n, pending, pending)
	// Finish waits for compaction past the rewrite, unless forced.
	_, err = e.step(rotation.StepFinish, rotation.Options{})
	if !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("finish before compaction: %v", err)
	}
	st = e.mustStep(rotation.StepFinish, rotation.Options{Force: true})
	if len(st.Keys) != 1 || activeKey(st) != pending || st.Next != "" {
		t.Fatalf("after finish: %+v", st)
	}
	e.check(n, pending, pending)

	// A node that starts on this state (no applied stream yet) opens
	// every value: it reads the record when it meets an unknown key.
	fresh := newEnvOn(t, e.log, fileTransformers(t, [2]string{"key1", "a"}))
	fresh.check(n, pending, pending)

	// A second rotation, aborted after promote: the previous key is active
	// again, the rewrite moves the values back, finish drops the other.
	second := e.mustStep(rotation.StepStart, rotation.Options{}).Keys[0].ID
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.rewriteAll()
	e.check(n, second, second)
	st = e.mustStep(rotation.StepAbort, rotation.Options{})
	if activeKey(st) != pending {
		t.Fatalf("after abort: %+v", st)
	}
	e.rewriteAll()
	e.check(n, pending, pending)
	st = e.mustStep(rotation.StepFinish, rotation.Options{Force: true})
	if len(st.Keys) != 1 || activeKey(st) != pending {
		t.Fatalf("after finishing the aborted key: %+v", st)
	}
	fresh.check(n, pending, pending)
}

func TestEncryptionKeyRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		file value.ResourceTransformers
		want string
	}{
		{"no configuration file", nil, "no --encryption-provider-config"},
		{"secrets not encrypted", fileTransformers(t), "does not encrypt secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.file)
			for _, step := range []rotation.Step{rotation.StepStatus, rotation.StepStart} {
				_, err := e.step(step, rotation.Options{})
				if !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), tc.want) {
					if tc.file != nil && step == rotation.StepStatus && err == nil {
						continue
					}
					t.Fatalf("%s: %v, want %q", step, err, tc.want)
				}
			}
			if res, _ := e.log.List(fsm.Prefix{Space: fsm.SpaceInternal, Resource: Resource}, fsm.ListOptions{}); len(res.KVs) != 0 {
				t.Fatal("a refused start stored a record")
			}
		})
	}
}

// A voter of an older build, which could not open values sealed with a
// data key, holds back start and promote, even forced.
func TestEncryptionKeyWaitsForEveryBuild(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	unable := []string{"n3"}
	e.s.cfg.Unable = func(context.Context) ([]string, error) { return unable, nil }
	for _, step := range []rotation.Step{rotation.StepStart, rotation.StepPromote} {
		if _, err := e.step(step, rotation.Options{Force: true}); !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), "[n3] run a build") {
			t.Fatalf("%s with an older voter: %v", step, err)
		}
		unable = nil
		e.mustStep(step, rotation.Options{})
		unable = []string{"n3"}
	}
}

// A value sealed with a key the node does not hold is an error naming the
// key, never quoting the value.
func TestUnknownKey(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	key := secretKey(0)
	val := []byte(Prefix + "0123456789abcdef:" + "very secret ciphertext")
	if res, err := e.log.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: key, Value: val}); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	_, _, err := e.get(key)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "0123456789abcdef") || strings.Contains(err.Error(), "very secret") {
		t.Fatalf("open: %v", err)
	}
}

// The file's keys rotated by kube's procedure (a new key first, the old
// second): the leader seals the record again with the new one.
func TestRecordFollowsTheFileKeys(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	e.put(secretKey(0), "secret 0")
	e.mustStep(rotation.StepStart, rotation.Options{})
	moved := newEnvOn(t, e.log, fileTransformers(t, [2]string{"key2", "b"}, [2]string{"key1", "a"}))
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: moved.stor.AtRestOf, IsLeader: func() bool { return true }}
	if err := moved.s.rewritePass(context.Background(), rc, rate.NewLimiter(rate.Inf, 1)); err != nil {
		t.Fatal(err)
	}
	kv, _, _ := e.log.Get(recordKey, 0)
	if !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Fatalf("the record is still sealed with %.30q", kv.Value)
	}
	only2 := newEnvOn(t, e.log, fileTransformers(t, [2]string{"key2", "b"}))
	if _, err := only2.root().Status(context.Background()); err != nil {
		t.Fatalf("the record with only the new file key: %v", err)
	}
}

func TestSealedWith(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{Prefix + "abc:xyz", "abc"},
		{Prefix + ":xyz", FileKey},
		{Prefix + strings.Repeat("a", 100) + ":x", FileKey},
		{"k8s:enc:aescbc:v1:key1:xyz", FileKey},
		{"\x0a\x0bplain", ""},
		{"", ""},
	} {
		if got := SealedWith([]byte(tc.in)); got != tc.want {
			t.Errorf("SealedWith(%.40q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// BenchmarkSealOpen: sealing and opening a 1 KiB Secret with the file's
// aescbc key, and with a data key (HKDF extended-nonce AES-GCM) in front of
// it, as every write and uncached read of an encrypted resource does.
func BenchmarkSealOpen(b *testing.B) {
	for _, tc := range []struct {
		name   string
		rotate bool
	}{{"file-aescbc", false}, {"data-key", true}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, fileTransformers(b, [2]string{"key1", "a"}))
			if tc.rotate {
				e.mustStep(rotation.StepStart, rotation.Options{})
				e.mustStep(rotation.StepPromote, rotation.Options{})
			}
			key := secretKey(0)
			at := e.stor.AtRestOf(key)
			plain := bytes.Repeat([]byte("x"), 1024)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sealed, err := at.Seal(key, plain)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := at.Open(&fsm.KV{Key: key, Value: sealed}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRewrite: the leader's rewrite of one stored Secret under a
// promoted key (open, seal, a compare-and-swap through the one-voter log),
// unthrottled: the CPU --encryption-rewrite-rate spends per value.
func BenchmarkRewrite(b *testing.B) {
	e := newEnv(b, fileTransformers(b, [2]string{"key1", "a"}))
	for i := 0; i < b.N; i++ {
		e.put(secretKey(i), "secret")
	}
	e.mustStep(rotation.StepStart, rotation.Options{})
	e.mustStep(rotation.StepPromote, rotation.Options{})
	var kvs []*fsm.KV
	e.log.FSM.Export().Live(func(kv *fsm.KV) bool {
		if kv.Key.Resource == "secrets" {
			kvs = append(kvs, kv)
		}
		return true
	})
	b.ReportAllocs()
	b.ResetTimer()
	for _, kv := range kvs {
		if err := e.s.rewrite(context.Background(), e.stor.AtRestOf(kv.Key), kv); err != nil {
			b.Fatal(err)
		}
	}
}

// kube's rotation of the file's keys (a new key first, the old second):
// the leader reseals the internal records, which no client can rewrite,
// and leaves the Secrets to the operator's rewrite, as kube does.
func TestResealInternal(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	e.put(secretKey(0), "secret 0")
	e.put(internalKey, "private")
	rotated := newEnvOn(t, e.log, fileTransformers(t, [2]string{"key2", "b"}, [2]string{"key1", "a"}))
	for i := 0; i < 2; i++ { // idempotent
		if err := rotated.s.ResealInternal(context.Background(), e.log.FSM.Export, rotated.stor.AtRestOf); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(k fsm.Key) []byte { kv, _, _ := e.log.Get(k, 0); return kv.Value }
	if !bytes.HasPrefix(raw(internalKey), []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Fatalf("the internal record is sealed with %.30q", raw(internalKey))
	}
	if !bytes.HasPrefix(raw(secretKey(0)), []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("a Secret was rewritten: %.30q", raw(secretKey(0)))
	}
	only2 := newEnvOn(t, e.log, fileTransformers(t, [2]string{"key2", "b"}))
	if got, _, err := only2.get(internalKey); err != nil || got != "private" {
		t.Fatalf("the internal record with key1 gone: %q %v", got, err)
	}
}

// The leader's rewrite reports the stale values it found as a metric: the
// count before the rewrite, 0 once it is done, nothing before any pass.
func TestRewriteMetric(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	for i := 0; i < 3; i++ {
		e.put(secretKey(i), fmt.Sprintf("secret %d", i))
	}
	if n := testutil.CollectAndCount(e.s.Collector()); n != 0 {
		t.Fatalf("%d series before any pass", n)
	}
	e.mustStep(rotation.StepStart, rotation.Options{})
	e.mustStep(rotation.StepPromote, rotation.Options{})
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: e.stor.AtRestOf, IsLeader: func() bool { return true }}
	// A pass that may rewrite one value only.
	if err := e.s.rewritePass(context.Background(), rc, rate.NewLimiter(0, 0)); err == nil {
		t.Fatal("a pass with no rate to spend rewrote everything")
	}
	if got := testutil.ToFloat64(e.s.Collector()); got != 3 {
		t.Fatalf("stale values %v, want 3", got)
	}
	e.rewriteAll()
	if err := e.s.rewritePass(context.Background(), rc, rate.NewLimiter(rate.Inf, 1)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(e.s.Collector()); got != 0 {
		t.Fatalf("stale values %v after the rewrite, want 0", got)
	}
}
