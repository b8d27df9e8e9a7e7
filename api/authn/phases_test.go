package authn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/fsm"
)

// phaseWorld is one node's identity side with a fake clock and members.
type phaseWorld struct {
	*world
	now     time.Time
	applied map[string]uint64
	root    rotation.Root
}

func newPhaseWorld(t *testing.T, lifetime time.Duration) *phaseWorld {
	w := &phaseWorld{world: newWorld(t, nil), now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	w.keys.SetClock(func() time.Time { return w.now })
	w.keys.SetTokenLifetime(lifetime, false)
	w.keys.SetMembers(func(context.Context) (map[string]uint64, error) { return w.applied, nil })
	w.root = w.keys.Root()
	return w
}

// caughtUp makes every member have applied everything.
func (w *phaseWorld) caughtUp() {
	w.applied = map[string]uint64{"n1": w.log.AppliedIndex(), "n2": w.log.AppliedIndex(), "n3": w.log.AppliedIndex()}
}

func (w *phaseWorld) step(s rotation.Step, o rotation.Options) *rotation.Status {
	w.t.Helper()
	st, err := rotation.Run(context.Background(), w.root, s, o)
	if err != nil {
		w.t.Fatalf("%s: %v", s, err)
	}
	return st
}

// refused takes a step that must be refused with want and change nothing.
func (w *phaseWorld) refused(s rotation.Step, want error, msg string) {
	w.t.Helper()
	before := w.log.AppliedIndex()
	_, err := rotation.Run(context.Background(), w.root, s, rotation.Options{})
	if !errors.Is(err, want) || !strings.Contains(err.Error(), msg) {
		w.t.Fatalf("%s: %v, want %v containing %q", s, err, want, msg)
	}
	if w.log.AppliedIndex() != before {
		w.t.Fatalf("a refused %s wrote %d entries", s, w.log.AppliedIndex()-before)
	}
}

// phases maps key ids to phases.
func phases(st *rotation.Status) map[string]rotation.Phase {
	out := map[string]rotation.Phase{}
	for _, k := range st.Keys {
		out[k.ID] = k.Phase
	}
	return out
}

func (w *phaseWorld) signer() string {
	w.t.Helper()
	tok, err := w.keys.Generator("https://issuer.example").GenerateToken(context.Background(), mustClaims(), struct{}{})
	if err != nil {
		w.t.Fatal(err)
	}
	return kidOf(w.t.(*testing.T), tok)
}

func (w *phaseWorld) published() map[string]bool {
	out := map[string]bool{}
	for _, k := range w.keys.PublicKeys().GetPublicKeys(context.Background(), "") {
		out[k.KeyID] = true
	}
	return out
}

// TestSigningKeyRotationSteps walks the signing key through every step of
// the rotation model, with the refusals that keep it safe.
func TestSigningKeyRotationSteps(t *testing.T) {
	w := newPhaseWorld(t, time.Hour)
	sa := w.serviceAccount("default", "app")
	auds := []string{authn.DefaultIssuer}

	st := w.step(rotation.StepStatus, rotation.Options{})
	if len(st.Keys) != 1 || st.Keys[0].Phase != rotation.Active || !st.Keys[0].Issues || st.Next != "" {
		t.Fatalf("a fresh cluster's status: %+v", st)
	}
	old := st.Keys[0].ID
	w.refused(rotation.StepPromote, rotation.ErrNoRotation, "no pending key to promote")
	w.refused(rotation.StepAbort, rotation.ErrNoRotation, "nothing to abort")
	oldToken := mint(t, w.id.Tokens, sa, nil, nil, auds, nil)

	// start: published, trusted, signs nothing.
	st = w.step(rotation.StepStart, rotation.Options{})
	var pending string
	for id, p := range phases(st) {
		if p == rotation.Pending {
			pending = id
		}
	}
	if pending == "" || st.Next != rotation.StepPromote || !w.published()[pending] || !w.published()[old] {
		t.Fatalf("after start: %+v, published %v", st, w.published())
	}
	if w.signer() != old {
		t.Fatal("a pending key signs")
	}
	if again := w.step(rotation.StepStart, rotation.Options{}); !strings.Contains(again.Done, "pending already") || len(again.Keys) != 2 {
		t.Fatalf("a second start: %+v", again)
	}

	// promote waits for every member to trust the pending key.
	w.applied = map[string]uint64{"n1": w.log.AppliedIndex(), "n2": 1, "n3": w.log.AppliedIndex()}
	w.refused(rotation.StepPromote, rotation.ErrNotReady, "members [n2] have not applied the pending key yet")
	if st := w.step(rotation.StepStatus, rotation.Options{}); !strings.Contains(st.Waiting, "n2") {
		t.Fatalf("status does not say what promote waits for: %+v", st)
	}
	w.caughtUp()
	st = w.step(rotation.StepPromote, rotation.Options{})
	if p := phases(st); p[pending] != rotation.Active || p[old] != rotation.Retiring || st.Next != rotation.StepFinish {
		t.Fatalf("after promote: %+v", st)
	}
	if w.signer() != pending {
		t.Fatal("the promoted key does not sign")
	}
	if _, ok, err := w.authenticate(oldToken); !ok {
		t.Fatalf("a token of the retiring key: %v", err)
	}

	// finish waits for the retiring key's tokens to expire.
	w.refused(rotation.StepFinish, rotation.ErrNotReady, "tokens signed by key "+old+" may be valid until 2026-11-28T13:00:00Z")
	w.now = w.now.Add(time.Hour + time.Second)
	st = w.step(rotation.StepFinish, rotation.Options{})
	if len(st.Keys) != 1 || st.Keys[0].ID != pending || st.Next != "" {
		t.Fatalf("after finish: %+v", st)
	}
	if w.published()[old] {
		t.Fatal("a finished key is still published")
	}
	if _, ok, _ := w.authenticate(oldToken); ok {
		t.Fatal("a token of the finished key still verifies")
	}
	assertTombstones(t, w.log, 1)

	// abort before promote: the pending key is dropped for good.
	st = w.step(rotation.StepStart, rotation.Options{})
	st = w.step(rotation.StepAbort, rotation.Options{})
	if len(st.Keys) != 1 || st.Keys[0].ID != pending || w.signer() != pending {
		t.Fatalf("after abort of a pending key: %+v", st)
	}
	assertTombstones(t, w.log, 2)
	st = w.step(rotation.StepStart, rotation.Options{})
	if len(st.Keys) != 2 {
		t.Fatalf("start after an abort: %+v", st)
	}

	// abort after promote: the old key signs again, the new one retires
	// and its tokens keep verifying.
	w.caughtUp()
	st = w.step(rotation.StepPromote, rotation.Options{})
	newer := w.signer()
	newToken := mint(t, w.id.Tokens, sa, nil, nil, auds, nil)
	st = w.step(rotation.StepAbort, rotation.Options{})
	if p := phases(st); p[pending] != rotation.Active || p[newer] != rotation.Retiring || w.signer() != pending {
		t.Fatalf("after abort of a promotion: %+v", st)
	}
	if _, ok, err := w.authenticate(newToken); !ok {
		t.Fatalf("a token of the aborted key: %v", err)
	}
	// A forced finish removes it at once.
	if st = w.step(rotation.StepFinish, rotation.Options{Force: true}); len(st.Keys) != 1 {
		t.Fatalf("forced finish: %+v", st)
	}
}

// A start that stopped between writing the key and the phase record is
// resumed by the next start, which adopts the key rather than making
// another; no one trusts the key in between.
func TestSigningKeyStartResumes(t *testing.T) {
	w := newPhaseWorld(t, time.Hour)
	w.step(rotation.StepStart, rotation.Options{})
	w.caughtUp()
	w.step(rotation.StepPromote, rotation.Options{})
	w.step(rotation.StepFinish, rotation.Options{Force: true})
	// The crash: generation 3's material is written, the record is not.
	if _, err := w.log.Propose(context.Background(), legacyKeyCommand(t, 3)); err != nil {
		t.Fatal(err)
	}
	if st := w.step(rotation.StepStatus, rotation.Options{}); len(st.Keys) != 1 {
		t.Fatalf("an unnamed key is trusted: %+v", st)
	}
	before := keyCount(t, w.log)
	st := w.step(rotation.StepStart, rotation.Options{})
	if keyCount(t, w.log) != before || len(st.Keys) != 2 {
		t.Fatalf("start did not adopt the orphan: %d keys stored (was %d), status %+v", keyCount(t, w.log), before, st)
	}
}

// A key aborted after its promotion and then finished is gone for good:
// its material is a tombstone, the next start makes another key, and the
// tokens it signed never verify again (issue 29's red team).
func TestSigningKeyAbortedThenFinishedStaysGone(t *testing.T) {
	w := newPhaseWorld(t, time.Hour)
	sa := w.serviceAccount("default", "app")
	w.step(rotation.StepStart, rotation.Options{})
	w.caughtUp()
	w.step(rotation.StepPromote, rotation.Options{})
	aborted := w.signer()
	tok := mint(t, w.id.Tokens, sa, nil, nil, []string{authn.DefaultIssuer}, nil)
	w.step(rotation.StepAbort, rotation.Options{})
	w.step(rotation.StepFinish, rotation.Options{Force: true})
	if _, ok, _ := w.authenticate(tok); ok {
		t.Fatal("a token of the finished key verifies")
	}
	st := w.step(rotation.StepStart, rotation.Options{})
	for _, k := range st.Keys {
		if k.ID == aborted {
			t.Fatalf("start brought the finished key back: %+v", st)
		}
	}
	if _, ok, _ := w.authenticate(tok); ok {
		t.Fatal("a token of the finished key verifies again")
	}
	assertTombstones(t, w.log, 1)
}

// A record from before any step: the newest key is active, older ones
// retiring (what Rotate made before phases), and finish needs --force
// because when they retired is unknown.
func TestSigningKeysBeforePhases(t *testing.T) {
	w := newPhaseWorld(t, time.Hour)
	// A second generation, written as earlier builds wrote it.
	if _, err := w.log.Propose(context.Background(), legacyKeyCommand(t, 2)); err != nil {
		t.Fatal(err)
	}
	st := w.step(rotation.StepStatus, rotation.Options{})
	if len(st.Keys) != 2 || st.Keys[0].Phase != rotation.Active || st.Keys[1].Phase != rotation.Retiring || st.Next != rotation.StepFinish {
		t.Fatalf("legacy keys: %+v", st)
	}
	w.refused(rotation.StepFinish, rotation.ErrNotReady, "retired before phases were recorded")
	w.refused(rotation.StepStart, rotation.ErrNotReady, "a retiring key is still trusted")
	if st := w.step(rotation.StepFinish, rotation.Options{Force: true}); len(st.Keys) != 1 {
		t.Fatalf("forced finish: %+v", st)
	}
}

// Without a bound on token lifetimes, finish says so and needs --force.
func TestSigningKeyFinishUnbounded(t *testing.T) {
	w := newPhaseWorld(t, 0)
	w.step(rotation.StepStart, rotation.Options{})
	w.caughtUp()
	w.step(rotation.StepPromote, rotation.Options{})
	w.now = w.now.Add(10 * 365 * 24 * time.Hour)
	w.refused(rotation.StepFinish, rotation.ErrNotReady, "no bounded lifetime")
}

func assertTombstones(t *testing.T, l *localLog, want int) {
	t.Helper()
	res, err := l.f.List(fsm.Prefix{Space: authn.FirstKey.Space, Resource: authn.FirstKey.Resource}, fsm.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range res.KVs {
		if strings.Contains(string(kv.Value), `"retired":true`) {
			n++
		}
	}
	if n != want {
		t.Fatalf("%d tombstones, want %d", n, want)
	}
}

// legacyKeyCommand writes signing key generation gen as builds before
// phases did: the material alone.
func legacyKeyCommand(t *testing.T, gen int) *fsm.Command {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	val, _ := json.Marshal(map[string]any{"alg": "ES256", "pkcs8": der})
	key := authn.FirstKey
	key.Name = fmt.Sprintf("%020d", gen)
	return &fsm.Command{Op: fsm.OpPut, Key: key, Value: val, MustNotExist: true}
}
