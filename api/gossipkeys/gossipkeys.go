package gossipkeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/trustplane/trustplane/api/keyrecord"
	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
)

// Root is the gossip key's name in the operator interface.
const Root = "gossip-key"

// recordKey is the keyring's record, in the internal key space.
// A restore into a new cluster leaves it out (cluster.GossipKeysResource).
var recordKey = fsm.Key{Space: fsm.SpaceInternal, Resource: cluster.GossipKeysResource, Name: "keyring"}

// Sentinel errors.
var (
	// ErrBadRecord: the stored keyring cannot be opened or decoded. The
	// message names the record, never its bytes.
	ErrBadRecord = errors.New("gossipkeys: the stored gossip keyring is unreadable")
	// ErrConflict: the keyring changed between a step's read and write.
	ErrConflict = errors.New("gossipkeys: the gossip keyring changed meanwhile")
)

// Backend is what the store needs of the replicated state machine: its
// record's (keyrecord.Backend).
type Backend = keyrecord.Backend

// Keyring is this node's gossip keyring (cluster.Node.SetGossipKeys).
type Keyring interface {
	SetGossipKeys(primary []byte, trusted [][]byte) error
}

// Config configures a Store.
type Config struct {
	Backend Backend
	// AtRest seals the record: the registry's transformation of secrets,
	// as for the token signing keys.
	AtRest storage.AtRest
	// Keyring is the node's gossip keyring, set to the record's keys.
	Keyring Keyring
	// Members returns the members' applied indexes by name, for the steps
	// that wait until every member has applied the keyring.
	Members rotation.Applied
	// Path is the node's copy of the keyring it last applied (Local),
	// with which it starts gossip before it has replayed the log.
	Path string
	// CaughtUp reports whether the node has applied what its leader has
	// committed; nil: always. The keyring follows the record only then, so
	// that a node replaying its log does not send, for a moment, with a
	// key its peers have dropped since.
	CaughtUp func() bool
	// Now is the clock that stamps phases; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Store keeps a node's gossip keyring following the replicated record,
// and is the gossip key's rotation root on the leader.
type Store struct {
	cfg  Config
	kick chan struct{}

	mu      sync.Mutex // serialises syncs
	applied uint64     // ModRevision of the record last applied
	// floor is the revision of the record the node's copy (Path) is
	// from: an older record is history a restarted node replays (from an
	// older snapshot), never applied to the keyring.
	floor uint64
}

// New returns a Store; Run keeps the keyring in step.
func New(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg, kick: make(chan struct{}, 1)}
	if cfg.Path != "" {
		if l, ok, err := LoadLocal(cfg.Path); err == nil && ok {
			s.floor = l.Revision
		}
	}
	return s
}

// record is the stored keyring, newest key first.
type record struct {
	Keys []rotation.Keyed `json:"keys"`
}

// keyID names a key without revealing it.
func keyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

func (r *record) entries() []rotation.Entry { return rotation.EntriesOf(r.Keys) }

// withEntries is r with es's phases (rotation.WithEntries).
func (r *record) withEntries(es []rotation.Entry, added map[string][]byte) *record {
	return &record{Keys: rotation.WithEntries(r.Keys, es, added)}
}

// keys are the record's active key and every key it trusts.
func (r *record) keys() (primary []byte, trusted [][]byte) {
	for _, e := range r.Keys {
		trusted = append(trusted, e.Key)
		if e.Phase == rotation.Active && primary == nil {
			primary = e.Key
		}
	}
	return primary, trusted
}

// read reads and opens the record; nil when there is none.
func (s *Store) read() (*record, *fsm.KV, error) {
	var rec record
	kv, err := s.record().Read(&rec)
	switch {
	case err != nil && errors.Is(err, keyrecord.ErrUnreadable):
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRecord, err)
	case err != nil || kv == nil:
		return nil, nil, err
	}
	if len(rec.Keys) == 0 {
		return nil, nil, ErrBadRecord
	}
	for _, e := range rec.Keys {
		if len(e.Key) != 32 || keyID(e.Key) != e.ID {
			return nil, nil, ErrBadRecord
		}
	}
	return &rec, kv, nil
}

// write stores rec with a compare-and-swap on prev (nil: must not exist).
func (s *Store) write(ctx context.Context, prev *fsm.KV, rec *record) error {
	err := s.record().Write(ctx, prev, rec)
	if errors.Is(err, keyrecord.ErrConflict) {
		return fmt.Errorf("%w (%v)", ErrConflict, err)
	}
	return err
}

// record is the stored record (keyrecord).
func (s *Store) record() keyrecord.Record {
	return keyrecord.Record{Backend: s.cfg.Backend, Key: recordKey, AtRest: s.cfg.AtRest}
}

// Seed writes the keyring with key, the key gossip runs with, as its
// active key, unless a keyring is stored already: files given by flag seed
// the set on the first start, and the replicated set is the truth from
// then on. It runs on the leader at bootstrap and is idempotent.
func (s *Store) Seed(ctx context.Context, key []byte) error {
	rec, _, err := s.read()
	if err != nil || rec != nil {
		return err
	}
	seed := &record{Keys: []rotation.Keyed{{Entry: rotation.Entry{ID: keyID(key), Phase: rotation.Active}, Key: key}}}
	if err := s.write(ctx, nil, seed); err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	return nil
}

// Listener side: the keyring follows every change of the record, off the
// apply path.

// OnApply wakes Run when the record changed.
func (s *Store) OnApply(events []fsm.Event) {
	for _, ev := range events {
		if ev.KV != nil && ev.KV.Key == recordKey {
			s.wake()
			return
		}
	}
}

// OnIndex is not needed.
func (s *Store) OnIndex(uint64) {}

// OnRestore: a snapshot replaced the state.
func (s *Store) OnRestore(uint64) { s.wake() }

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run applies the record to the keyring, once at start and then after
// every change, until ctx ends; while the node is catching up it looks
// again every second.
func (s *Store) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	s.wake()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			pending = true
		case <-tick.C:
		}
		if !pending {
			continue
		}
		if s.cfg.CaughtUp != nil && !s.cfg.CaughtUp() {
			continue
		}
		pending = false
		if err := s.sync(); err != nil {
			s.cfg.Logger.Warn("gossip keyring not applied", "error", err)
		}
	}
}

// sync sets the keyring to the record and keeps the node's copy of it.
func (s *Store) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, kv, err := s.read()
	if err != nil || rec == nil || kv.ModRevision == s.applied || kv.ModRevision < s.floor {
		return err
	}
	primary, trusted := rec.keys()
	if primary == nil {
		return fmt.Errorf("%w: no active key", ErrBadRecord)
	}
	if err := s.cfg.Keyring.SetGossipKeys(primary, trusted); err != nil {
		return err
	}
	if s.cfg.Path != "" {
		if err := saveLocal(s.cfg.Path, Local{Primary: primary, Trusted: trusted, Revision: kv.ModRevision}); err != nil {
			return err
		}
	}
	s.applied, s.floor = kv.ModRevision, kv.ModRevision
	s.cfg.Logger.Info("gossip keyring applied", "active", keyID(primary), "trusted", len(trusted))
	return nil
}

// Local is a node's copy of the keyring it last applied, and the revision
// of the record it is from.
type Local struct {
	Primary  []byte   `json:"primary"`
	Trusted  [][]byte `json:"trusted"`
	Revision uint64   `json:"revision,omitempty"`
}

// LoadLocal reads a node's copy of its keyring; false when it has none.
func LoadLocal(path string) (Local, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Local{}, false, nil
	}
	if err != nil {
		return Local{}, false, err
	}
	var l Local
	if json.Unmarshal(b, &l) != nil || len(l.Primary) != 32 {
		return Local{}, false, fmt.Errorf("gossipkeys: %s is unreadable", path)
	}
	for _, k := range l.Trusted {
		if len(k) != 32 {
			return Local{}, false, fmt.Errorf("gossipkeys: %s is unreadable", path)
		}
	}
	return l, true, nil
}

// saveLocal writes the copy atomically, 0600 from the first byte: it holds
// the gossip keys.
func saveLocal(path string, l Local) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gossip-keyring-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// newKey makes a random AES-256 key.
func newKey() ([]byte, error) {
	k := make([]byte, 32)
	_, err := rand.Read(k)
	return k, err
}
