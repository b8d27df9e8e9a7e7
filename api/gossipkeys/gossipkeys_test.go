package gossipkeys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
)

// fakeKeyring records what the store sets.
type fakeKeyring struct {
	primary []byte
	trusted [][]byte
}

func (f *fakeKeyring) SetGossipKeys(primary []byte, trusted [][]byte) error {
	f.primary, f.trusted = primary, trusted
	return nil
}

type env struct {
	t       *testing.T
	log     *memlog.Log
	kr      *fakeKeyring
	s       *Store
	applied map[string]uint64
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, log: memlog.New(), kr: &fakeKeyring{}}
	e.s = New(Config{
		Backend: e.log, AtRest: storage.AtRest{}, Keyring: e.kr,
		Members: func(context.Context) (map[string]uint64, error) { return e.applied, nil },
		Path:    filepath.Join(t.TempDir(), "gossip-keyring.json"),
		Now:     func() time.Time { return time.Unix(1000, 0) },
	})
	return e
}

func (e *env) caughtUp() {
	i := e.log.AppliedIndex()
	e.applied = map[string]uint64{"n1": i, "n2": i, "n3": i}
}

func (e *env) step(s rotation.Step, o rotation.Options) *rotation.Status {
	e.t.Helper()
	st, err := rotation.Run(context.Background(), e.s.Root(), s, o)
	if err != nil {
		e.t.Fatalf("%s: %v", s, err)
	}
	if err := e.s.sync(); err != nil {
		e.t.Fatalf("sync after %s: %v", s, err)
	}
	return st
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestGossipKeyRotation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := rotation.Run(ctx, e.s.Root(), rotation.StepStart, rotation.Options{}); !errors.Is(err, rotation.ErrNotReady) {
		t.Fatalf("start before the seed: %v", err)
	}
	old, next := key(1), key(2)
	for i := 0; i < 2; i++ { // idempotent
		if err := e.s.Seed(ctx, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.sync(); err != nil || !bytes.Equal(e.kr.primary, old) || len(e.kr.trusted) != 1 {
		t.Fatalf("after the seed: %v, keyring %x", err, e.kr.primary)
	}

	st := e.step(rotation.StepStart, rotation.Options{Key: next})
	if !bytes.Equal(e.kr.primary, old) || len(e.kr.trusted) != 2 || st.Next != rotation.StepPromote {
		t.Fatalf("after start: primary %x, %d trusted, %+v", e.kr.primary, len(e.kr.trusted), st)
	}
	for _, k := range [][]byte{old, next} {
		if b, _ := json.Marshal(st); bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString(k))) {
			t.Fatal("the status carries a key's bytes")
		}
	}

	// promote waits for every voter to decrypt with the new key.
	e.applied = map[string]uint64{"n1": e.log.AppliedIndex(), "n2": 1}
	if _, err := rotation.Run(ctx, e.s.Root(), rotation.StepPromote, rotation.Options{}); !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), "[n2]") {
		t.Fatalf("promote with a voter behind: %v", err)
	}
	e.caughtUp()
	e.step(rotation.StepPromote, rotation.Options{})
	if !bytes.Equal(e.kr.primary, next) || len(e.kr.trusted) != 2 {
		t.Fatalf("after promote: primary %x, %d trusted", e.kr.primary, len(e.kr.trusted))
	}

	// finish waits for every voter to send with it.
	e.applied = map[string]uint64{"n1": e.log.AppliedIndex(), "n2": e.log.AppliedIndex() - 1}
	if _, err := rotation.Run(ctx, e.s.Root(), rotation.StepFinish, rotation.Options{}); !errors.Is(err, rotation.ErrNotReady) {
		t.Fatalf("finish with a voter behind: %v", err)
	}
	e.caughtUp()
	st = e.step(rotation.StepFinish, rotation.Options{})
	if !bytes.Equal(e.kr.primary, next) || len(e.kr.trusted) != 1 || len(st.Keys) != 1 {
		t.Fatalf("after finish: primary %x, %d trusted, %+v", e.kr.primary, len(e.kr.trusted), st)
	}

	// The node's copy is what it applied last.
	l, ok, err := LoadLocal(e.s.cfg.Path)
	if err != nil || !ok || !bytes.Equal(l.Primary, next) || len(l.Trusted) != 1 {
		t.Fatalf("LoadLocal = %+v, %v, %v", l, ok, err)
	}

	// abort after promote goes back; before promote drops the new key.
	e.step(rotation.StepStart, rotation.Options{})
	e.caughtUp()
	e.step(rotation.StepPromote, rotation.Options{})
	e.step(rotation.StepAbort, rotation.Options{})
	if !bytes.Equal(e.kr.primary, next) || len(e.kr.trusted) != 2 {
		t.Fatalf("after abort of a promotion: primary %x, %d trusted", e.kr.primary, len(e.kr.trusted))
	}
	if _, err := rotation.Run(ctx, e.s.Root(), rotation.StepStart, rotation.Options{Key: key(3)}); !errors.Is(err, rotation.ErrNotReady) {
		t.Fatalf("start while a key retires: %v", err)
	}
	e.caughtUp()
	e.step(rotation.StepFinish, rotation.Options{})
	e.step(rotation.StepStart, rotation.Options{Key: key(3)})
	e.step(rotation.StepAbort, rotation.Options{})
	if len(e.kr.trusted) != 1 || !bytes.Equal(e.kr.primary, next) {
		t.Fatalf("after abort of a start: primary %x, %d trusted", e.kr.primary, len(e.kr.trusted))
	}
	if _, err := rotation.Run(ctx, e.s.Root(), rotation.StepStart, rotation.Options{Key: []byte("short")}); !errors.Is(err, rotation.ErrNotReady) {
		t.Fatalf("a key of the wrong size: %v", err)
	}
}

// A record that cannot be read is named, never quoted.
func TestGossipKeyringUnreadable(t *testing.T) {
	e := newEnv(t)
	if _, err := e.log.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: recordKey, Value: []byte(`{"keys":[{"id":"x","key":"U0VDUkVU"}]}`)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.Root().Status(context.Background())
	if !errors.Is(err, ErrBadRecord) || strings.Contains(err.Error(), "U0VDUkVU") {
		t.Fatalf("Status = %v", err)
	}
}

// A node restarted from a snapshot older than the record its copy of the
// keyring is from never applies that history's keyring: its peers may
// have dropped those keys (docs/REDTEAM-node-ca.md NCA-1, the same case).
func TestGossipKeyringHistoryAfterARestart(t *testing.T) {
	e := newEnv(t)
	if err := saveLocal(e.s.cfg.Path, Local{Primary: key(9), Trusted: [][]byte{key(9)}, Revision: 1000}); err != nil {
		t.Fatal(err)
	}
	restarted := New(e.s.cfg)
	if err := restarted.Seed(context.Background(), key(1)); err != nil { // an old record
		t.Fatal(err)
	}
	if err := restarted.sync(); err != nil {
		t.Fatal(err)
	}
	if e.kr.primary != nil {
		t.Fatal("a record older than the node's copy was applied to its keyring")
	}
	if l, _, _ := LoadLocal(e.s.cfg.Path); !bytes.Equal(l.Primary, key(9)) || l.Revision != 1000 {
		t.Fatalf("the node's copy was overwritten with history: %+v", l)
	}
}
