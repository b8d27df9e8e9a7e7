package encryptionkeys

// Red-team tests (docs/REDTEAM-encryption-keys.md). Each one states the property that the
// design promises and that the code breaks.

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

	"golang.org/x/time/rate"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/fsm"
)

// RT-1. A node whose store was made after its state was restored (every
// restart from a Raft snapshot: cluster.New restores the snapshot inside
// raft.NewRaft, and serve subscribes the store only afterwards, so
// OnRestore never runs) runs with no key set at all: it seals with the
// file's keys although a data key is active, until it happens to read a
// value sealed with a data key. As the leader, its rewrite pass takes the
// file's keys for the active one, finds nothing to do, and records the
// rewrite as done: from then on no pass runs, and finish is refused for
// ever ("the leader is rewriting them") while every value stays sealed
// with the retiring key.
func TestRedteamRestartedNodeSealsWithActiveKey(t *testing.T) {
	file := fileTransformers(t, [2]string{"key1", "a"})
	e := newEnv(t, file)
	for i := 0; i < 3; i++ {
		e.put(secretKey(i), fmt.Sprintf("secret %d", i))
	}
	e.mustStep(rotation.StepStart, rotation.Options{})
	active := activeKey(e.mustStep(rotation.StepPromote, rotation.Options{}))

	// The node restarts: its store and storage are new, the state (with
	// the record naming the active data key) is there before them.
	restarted := newEnvOn(t, e.log, fileTransformers(t, [2]string{"key1", "a"}))
	restarted.put(secretKey(10), "written after the restart")
	if _, with, _ := restarted.get(secretKey(10)); with != active {
		t.Errorf("a write on the restarted node is sealed with %q, want the active data key %s", with, active)
	}

	// The restarted node leads and runs its rewrite.
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: restarted.stor.AtRestOf, IsLeader: func() bool { return true }}
	for i := 0; i < 3; i++ {
		if err := restarted.s.rewritePass(context.Background(), rc, rate.NewLimiter(rate.Inf, 1)); err != nil {
			t.Fatal(err)
		}
	}
	rec, _, err := restarted.s.read()
	if err != nil {
		t.Fatal(err)
	}
	byKey, _ := e.root().(root).census()
	if rec.Rewritten != 0 && byKey[FileKey] > 0 {
		_, ferr := restarted.step(rotation.StepFinish, rotation.Options{Force: true})
		t.Fatalf("the rewrite is recorded done at %d while %d values are sealed with the retiring file key; no pass will move them, finish: %v", rec.Rewritten, byKey[FileKey], ferr)
	}
}

// RT-2. The rewrite pass takes the active key from the node's key set
// (s.current()) and the rest from the record it read (s.read()); the two
// differ between the fsm applying a step and OnApply loading it. A pass
// that reads the new record (promote, abort) with the old key set finds
// nothing to do, records Rewritten with a compare-and-swap that succeeds,
// and no pass ever runs again: finish is refused for ever. Simulated here
// with a key set that lags the record by one step.
func TestRedteamRewriteUsesTheRecordsActiveKey(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	for i := 0; i < 3; i++ {
		e.put(secretKey(i), fmt.Sprintf("secret %d", i))
	}
	e.mustStep(rotation.StepStart, rotation.Options{})
	stale := e.s.keys.Load() // the key set as of start: file active
	e.mustStep(rotation.StepPromote, rotation.Options{})
	// The promote entry is applied, OnApply has not loaded it yet.
	e.s.keys.Store(stale)
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: e.stor.AtRestOf, IsLeader: func() bool { return true }}
	if err := e.s.rewritePass(context.Background(), rc, rate.NewLimiter(rate.Inf, 1)); err != nil {
		t.Fatal(err)
	}
	rec, _, err := e.s.read()
	if err != nil {
		t.Fatal(err)
	}
	byKey, _ := e.root().(root).census()
	if rec.Rewritten != 0 && byKey[FileKey] > 0 {
		t.Fatalf("the rewrite is recorded done at %d while %d values are sealed with the retiring file key", rec.Rewritten, byKey[FileKey])
	}
}

// failingBackend fails the proposals fail picks, as a leader that loses
// its leadership between two writes does.
type failingBackend struct {
	Backend
	fail func(*fsm.Command) bool
}

func (b failingBackend) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if b.fail != nil && b.fail(cmd) {
		return nil, errors.New("leadership lost")
	}
	return b.Backend.Propose(ctx, cmd)
}

// RT-3. The signing keys decide which material "a start in progress" is
// by comparing ModRevisions (api/authn/phases.go startInProgress: material
// newer than the phase record). The encryption rewrite (and KeyStore.
// Reencrypt on each new leader while a data key is being rotated) writes
// every signing key again, so material the phase record dropped becomes
// newer than the record: a signing key that was aborted and finished, whose
// tombstone a leader change prevented, is then never tombstoned, and the
// next signing-key start adopts it as its pending key: the aborted key,
// and every token it signed, comes back.
func TestRedteamEncryptionRewriteRevivesAFinishedSigningKey(t *testing.T) {
	for _, rotateEncryption := range []bool{false, true} {
		t.Run(fmt.Sprintf("encryption rotated %v", rotateEncryption), func(t *testing.T) {
			e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
			fb := &failingBackend{Backend: e.log}
			keys := authn.NewKeyStore(fb, e.log.FSM, e.stor.InternalAtRest())
			if err := keys.EnsureKey(context.Background()); err != nil {
				t.Fatal(err)
			}
			root := keys.Root()
			step := func(s rotation.Step, o rotation.Options) *rotation.Status {
				t.Helper()
				st, err := rotation.Run(context.Background(), root, s, o)
				if err != nil {
					t.Fatalf("signing key %s: %v", s, err)
				}
				return st
			}
			// Start, promote, abort after promote: the new key retires.
			aborted := activeKey(func() *rotation.Status {
				step(rotation.StepStart, rotation.Options{})
				return step(rotation.StepPromote, rotation.Options{Force: true})
			}())
			step(rotation.StepAbort, rotation.Options{})
			// finish writes the record, then the leader is lost before the
			// tombstone of the key it removed.
			phasesWritten := false
			fb.fail = func(c *fsm.Command) bool {
				if c.Key.Resource == "signingkeyphases" {
					phasesWritten = true
					return false
				}
				return phasesWritten && c.Key.Resource == "signingkeys"
			}
			if _, err := rotation.Run(context.Background(), root, rotation.StepFinish, rotation.Options{Force: true}); err == nil {
				t.Fatal("the simulated leader loss did not fail finish")
			}
			fb.fail = nil

			if rotateEncryption {
				e.mustStep(rotation.StepStart, rotation.Options{})
				e.mustStep(rotation.StepPromote, rotation.Options{})
				e.rewriteAll()
			}
			// The operator takes finish again, as its error says, then a
			// new rotation of the signing key.
			step(rotation.StepFinish, rotation.Options{Force: true})
			st := step(rotation.StepStart, rotation.Options{})
			for _, k := range st.Keys {
				if k.ID == aborted {
					t.Fatalf("signing-key start adopted the aborted and finished key %s as %s", aborted, k.Phase)
				}
			}
			if !strings.Contains(st.Done, "started") {
				t.Fatalf("start: %+v", st)
			}
		})
	}
}

// identityFirst is kube's file for leaving encryption: identity first,
// the aescbc key still there to read what it sealed.
func identityFirst(t testing.TB, key [2]string) value.ResourceTransformers {
	t.Helper()
	yaml := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  - aescbc:\n      keys:\n      - name: " + key[0] + "\n        secret: " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(key[1]), 32)) + "\n"
	path := filepath.Join(t.TempDir(), "enc.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := encryptionconfig.LoadEncryptionConfig(context.Background(), path, false, "")
	if err != nil {
		t.Fatal(err)
	}
	return encryptionconfig.StaticTransformers(loaded.Transformers)
}

// RT-4. kube's procedure to stop encrypting (identity first, the old key
// second, rewrite everything, drop the key) does not work once a data key
// is active: the leader's rewrite never moves a value sealed with the
// active data key (id == active) although every node now reads it as
// stale, so the signing keys, the gossip keyring and every Secret nobody
// writes stay sealed with a data key whose record only the file's key
// opens; and every rewrite pass (each second, on the leader) fails to
// reseal the record (errNotEncrypted) and logs a warning, for ever.
func TestRedteamLeavingEncryptionAfterARotation(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	e.put(secretKey(0), "secret 0")
	e.put(internalKey, "private")
	e.mustStep(rotation.StepStart, rotation.Options{})
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.rewriteAll()
	e.mustStep(rotation.StepFinish, rotation.Options{Force: true})

	// Every node restarts with identity first.
	off := newEnvOn(t, e.log, identityFirst(t, [2]string{"key1", "a"}))
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: off.stor.AtRestOf, IsLeader: func() bool { return true }}
	var passErr error
	for i := 0; i < 3; i++ {
		passErr = off.s.rewritePass(context.Background(), rc, rate.NewLimiter(rate.Inf, 1))
	}
	var sealed []string
	for _, k := range []fsm.Key{secretKey(0), internalKey} {
		if _, with, err := off.get(k); err != nil || with != "" {
			sealed = append(sealed, fmt.Sprintf("%s sealed with %q (%v)", k.Resource, with, err))
		}
	}
	if len(sealed) > 0 || passErr != nil {
		t.Fatalf("with identity first, the rewrite leaves %v; each pass fails with: %v", sealed, passErr)
	}
}

// RT-5. Whether a value is encrypted is guessed from its first bytes
// (SealedWith: "k8s:enc:"), also for internal records that are never
// sealed: a removal marker's value is the node's name, as given to
// --node-name, which nothing validates. A node named "k8s:enc:n3" that was
// removed leaves a marker the census counts as sealed with the file's key
// and the rewrite cannot open: finish is refused for ever, even forced.
func TestRedteamPlainInternalRecordLooksEncrypted(t *testing.T) {
	e := newEnv(t, fileTransformers(t, [2]string{"key1", "a"}))
	e.put(secretKey(0), "secret 0")
	marker := fsm.Key{Space: fsm.SpaceInternal, Resource: "removedmembers", Name: "k8s:enc:n3"}
	if res, err := e.log.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: marker, Value: []byte(marker.Name), UID: "removed-member/" + marker.Name}); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	e.mustStep(rotation.StepStart, rotation.Options{})
	e.mustStep(rotation.StepPromote, rotation.Options{})
	rc := RewriteConfig{Export: e.log.FSM.Export, AtRestOf: e.stor.AtRestOf, IsLeader: func() bool { return true }}
	for i := 0; i < 3; i++ {
		_ = e.s.rewritePass(context.Background(), rc, rate.NewLimiter(rate.Inf, 1))
	}
	if _, err := e.step(rotation.StepFinish, rotation.Options{Force: true}); err != nil {
		t.Fatalf("a removal marker (never encrypted) blocks finish: %v", err)
	}
}
