package encryptionkeys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/aes"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// Root is the encryption key's name in the operator interface.
const Root = "encryption-key"

// Resource is the record's resource in the internal key space. A backup
// keeps it: the cluster it is restored into needs it to open its values.
const Resource = "encryptionkeys"

// recordKey is the record of the data keys.
var recordKey = fsm.Key{Space: fsm.SpaceInternal, Resource: Resource, Name: "keyring"}

// secrets is the resource whose file transformer seals the record.
var secrets = schema.GroupResource{Resource: "secrets"}

// FileKey is the id of the configuration file's keys as an entry: the
// active key before the first rotation.
const FileKey = "file"

// Prefix starts every value sealed with a data key, followed by the key's
// id and a colon (kube's "k8s:enc:<provider>:v1:<name>:" form).
const Prefix = "k8s:enc:trustplane:v1:"

// encPrefix starts every value kube's providers or a data key encrypted.
const encPrefix = "k8s:enc:"

// Feature is what a build that opens values sealed with data keys reports
// to its peers (cluster.Config.Features): start and promote wait until
// every member does, since a node of an older build would fail every read
// of such a value.
const Feature = "encryption-data-keys"

// keyBytes is a data key's length: kube's minimum seed for its extended
// nonce AES-GCM.
const keyBytes = aes.MinSeedSizeExtendedNonceGCM

// Sentinel errors.
var (
	// ErrBadRecord: the stored record cannot be opened or decoded. The
	// message names the record, never its bytes.
	ErrBadRecord = errors.New("encryptionkeys: the stored encryption keys are unreadable")
	// ErrConflict: the record changed between a step's read and write.
	ErrConflict = errors.New("encryptionkeys: the encryption keys changed meanwhile")
	// ErrUnknownKey: a value is sealed with a data key this node does not
	// hold (removed by a finished rotation, or a record it cannot open).
	ErrUnknownKey = errors.New("encryptionkeys: the value is sealed with an encryption key this node does not hold")
)

// Backend is what the store needs of the replicated state machine.
type Backend interface {
	Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error)
}

// Config configures a Store.
type Config struct {
	Backend Backend
	// File is the configuration file's transformers (kube's, per
	// resource); nil when there is none, and nothing is encrypted.
	File value.ResourceTransformers
	// Members returns the members' applied indexes by name, for the steps
	// that wait until every member has applied the record.
	Members rotation.Applied
	// Unable returns the members whose build cannot open values sealed
	// with a data key (they do not report Feature); nil: none.
	Unable func(ctx context.Context) ([]string, error)
	// Now is the clock that stamps phases; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Store is a node's view of the data keys: the transformers every stored
// value goes through (Transformers), the rotation root on the leader
// (Root), and the leader's background rewrite (Run).
type Store struct {
	cfg Config
	// kek seals the record: the file's transformer for secrets.
	kek storage.AtRest

	loadMu sync.Mutex // serialises loads of the record
	keys   atomic.Pointer[keyset]
	// deks are the transformers of every data key met, by id, kept
	// across loads so that their derived-key caches survive.
	deks sync.Map
	// covered caches, by resource, whether the file encrypts it.
	covered sync.Map

	// progress is the leader's rewrite as status reports it, and stale
	// the count of stale values its last pass found (-1: not the leader,
	// or no pass yet).
	progress atomic.Pointer[string]
	stale    atomic.Int64
	// warnOnce says once that the file stopped encrypting secrets.
	warnOnce sync.Once
	// lastCheck is when the leader's rewrite last looked for stale values
	// after it was done (Run's goroutine only).
	lastCheck time.Time
}

// New returns a Store.
func New(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg}
	s.stale.Store(-1)
	if cfg.File != nil {
		s.kek = storage.AtRestWith(cfg.File.TransformerForResource(secrets))
	}
	return s
}

// record is the stored set of keys, newest first.
type record struct {
	Keys []rotation.Keyed `json:"keys"`
	// Rewritten is the revision at which the leader's rewrite last found
	// no encrypted value sealed with a key other than the active one; 0
	// while a rewrite is due (after start, promote or abort).
	Rewritten uint64 `json:"rewritten,omitempty"`
}

// fileOnly is the set before the first rotation: the file's keys, active.
func fileOnly() *record {
	return &record{Keys: []rotation.Keyed{{Entry: rotation.Entry{ID: FileKey, Phase: rotation.Active}}}}
}

// KeyID names a data key without revealing it.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

func (r *record) entries() []rotation.Entry { return rotation.EntriesOf(r.Keys) }

// withEntries is r with es's phases (rotation.WithEntries); the rewrite is
// due again.
func (r *record) withEntries(es []rotation.Entry, added map[string][]byte) *record {
	return &record{Keys: rotation.WithEntries(r.Keys, es, added)}
}

// valid reports whether r is a set a node can run with: one active key,
// every data key 32 bytes under its own id, the file's entry without bytes.
func (r *record) valid() bool {
	active := 0
	for _, e := range r.Keys {
		switch {
		case e.ID == FileKey && e.Key != nil:
			return false
		case e.ID != FileKey && (len(e.Key) != keyBytes || KeyID(e.Key) != e.ID):
			return false
		}
		if e.Phase == rotation.Active {
			active++
		}
	}
	return active == 1
}

// read reads and opens the record; nil when there is none.
func (s *Store) read() (*record, *fsm.KV, error) {
	res, err := s.cfg.Backend.List(fsm.Prefix{Space: recordKey.Space, Resource: recordKey.Resource}, fsm.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("encryptionkeys: reading the keys: %w", err)
	}
	for _, kv := range res.KVs {
		if kv.Key != recordKey {
			continue
		}
		plain, _, err := s.kek.Open(kv)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadRecord, err)
		}
		var rec record
		if json.Unmarshal(plain, &rec) != nil || !rec.valid() {
			return nil, nil, ErrBadRecord
		}
		return &rec, kv, nil
	}
	return nil, nil, nil
}

// write stores rec, sealed by the file's keys, with a compare-and-swap on
// prev (nil: must not exist).
func (s *Store) write(ctx context.Context, prev *fsm.KV, rec *record) error {
	plain, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	val, err := s.kek.Seal(recordKey, plain)
	if err != nil {
		return fmt.Errorf("encryptionkeys: sealing the keys: %w", err)
	}
	if !bytes.HasPrefix(val, []byte(encPrefix)) {
		// Never store data keys in the clear (the file's secrets provider
		// is identity): Start refuses first, this is the backstop.
		return errNotEncrypted
	}
	cmd := &fsm.Command{Op: fsm.OpPut, Key: recordKey, Value: val}
	if prev == nil {
		cmd.MustNotExist = true
	} else {
		cmd.ModRevision = prev.ModRevision
	}
	res, err := s.cfg.Backend.Propose(ctx, cmd)
	if err != nil {
		return fmt.Errorf("encryptionkeys: writing the keys: %w", err)
	}
	if res.Err != nil {
		return fmt.Errorf("%w (%v)", ErrConflict, res.Err)
	}
	return s.load()
}

var errNotEncrypted = fmt.Errorf("%w: the encryption configuration does not encrypt secrets, so the data keys would be stored in the clear; give secrets an encrypting provider first", rotation.ErrNotReady)

// keyset is the set of keys a node runs with.
type keyset struct {
	// rev is the record's ModRevision (0: no record).
	rev uint64
	// active is the key values are sealed with: FileKey or a data key.
	active string
	deks   map[string]value.Transformer
}

var fileKeys = &keyset{active: FileKey}

// current is the set this node runs with. A store that has not read the
// record yet reads it first: one made after the fsm restored its state
// (every restart from a Raft snapshot, which raft restores before serve
// subscribes the store) never sees OnRestore, and would otherwise seal
// with the file's keys while a data key is active (docs/REDTEAM-encryption-keys.md RT-1).
func (s *Store) current() *keyset {
	if ks := s.keys.Load(); ks != nil {
		return ks
	}
	if err := s.load(); err != nil {
		s.cfg.Logger.Warn("encryption keys not loaded", "error", err)
	}
	if ks := s.keys.Load(); ks != nil {
		return ks
	}
	return fileKeys
}

// load reads the record and runs with it, unless a newer one is in use.
func (s *Store) load() error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.cfg.File == nil {
		return nil
	}
	rec, kv, err := s.read()
	if err != nil {
		return err
	}
	if rec == nil {
		// No record yet: the file's keys, until one is applied.
		s.keys.CompareAndSwap(nil, &keyset{active: FileKey})
		return nil
	}
	if cur := s.keys.Load(); cur != nil && cur.rev >= kv.ModRevision {
		return nil
	}
	ks := &keyset{rev: kv.ModRevision, deks: map[string]value.Transformer{}}
	for _, e := range rec.Keys {
		if e.Phase == rotation.Active {
			ks.active = e.ID
		}
		if e.ID == FileKey {
			continue
		}
		t, err := s.dek(e.ID, e.Key)
		if err != nil {
			return err
		}
		ks.deks[e.ID] = t
	}
	s.keys.Store(ks)
	// A key the set no longer holds has nothing left to open.
	s.deks.Range(func(id, _ any) bool {
		if ks.deks[id.(string)] == nil {
			s.deks.Delete(id)
		}
		return true
	})
	return nil
}

// dek is the transformer of data key id.
func (s *Store) dek(id string, key []byte) (value.Transformer, error) {
	if t, ok := s.deks.Load(id); ok {
		return t.(value.Transformer), nil
	}
	t, err := aes.NewHKDFExtendedNonceGCMTransformer(key)
	if err != nil {
		return nil, fmt.Errorf("%w: key %s: %w", ErrBadRecord, id, err)
	}
	s.deks.Store(id, t)
	return t, nil
}

// lookup is the transformer of data key id, reading the record again when
// this node does not hold it yet.
func (s *Store) lookup(id string) (value.Transformer, *keyset) {
	ks := s.current()
	if t := ks.deks[id]; t != nil {
		return t, ks
	}
	if err := s.load(); err != nil {
		s.cfg.Logger.Warn("encryption keys not loaded", "error", err)
	}
	ks = s.current()
	return ks.deks[id], ks
}

// Listener side: the set follows every change of the record, on the apply
// path, so a value applied after the record opens with its key.

// OnApply runs with the record when it changed.
func (s *Store) OnApply(events []fsm.Event) {
	for _, ev := range events {
		if ev.KV != nil && ev.KV.Key == recordKey {
			if err := s.load(); err != nil {
				s.cfg.Logger.Warn("encryption keys not loaded", "error", err)
			}
			return
		}
	}
}

// OnIndex is not needed.
func (s *Store) OnIndex(uint64) {}

// OnRestore: a snapshot replaced the state; its record may be older than
// the one in use (a restore), so the set is read from scratch.
func (s *Store) OnRestore(uint64) {
	s.loadMu.Lock()
	s.keys.Store(nil)
	s.loadMu.Unlock()
	if err := s.load(); err != nil {
		s.cfg.Logger.Warn("encryption keys not loaded", "error", err)
	}
}

// PhaseCounts counts this node's encryption keys by phase, as it has
// applied them (trustplane_trust_root_keys); the file's keys count as one.
func (s *Store) PhaseCounts() (map[rotation.Phase]int, error) {
	out := map[rotation.Phase]int{rotation.Pending: 0, rotation.Active: 0, rotation.Retiring: 0}
	if s.cfg.File == nil {
		return out, nil
	}
	rec, _, err := s.read()
	if err != nil {
		return nil, err
	}
	if rec == nil {
		rec = fileOnly()
	}
	for _, e := range rec.Keys {
		out[e.Phase]++
	}
	return out, nil
}
