package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/serviceaccount"
	kjson "sigs.k8s.io/json"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// Sentinel errors of this package; callers test them with errors.Is.
var (
	// ErrNoSigningKey: no signing key has been applied on this node yet (a
	// follower that has not caught up, or a cluster still bootstrapping).
	ErrNoSigningKey = errors.New("authn: no service account signing key yet")
	// ErrKeyConflict: another leader wrote the same key generation first,
	// or changed a key being retired or re-encrypted; the caller may retry
	// against the new state.
	ErrKeyConflict = errors.New("authn: signing key generation already written")
	// ErrBadKey: a stored signing key could not be decoded. The message
	// names the key's generation, never its bytes.
	ErrBadKey = errors.New("authn: stored signing key is unreadable")
)

// keyPrefix is where signing keys live in the fsm: the internal key space,
// which no store of the API can reach (fsm.Space), so no API request, and
// no custom resource definition whatever it names, can read, write or
// watch them.
var keyPrefix = fsm.Prefix{Space: fsm.SpaceInternal, Resource: SigningKeysResource}

// SigningKeysResource is the internal resource the signing keys are kept
// under, sealed as Secrets are (storage.Config.SealedInternal).
const SigningKeysResource = "signingkeys"

// FirstKey is the fsm key of the first signing key; it is never deleted, so
// a node that has applied it has finished the identity bootstrap.
var FirstKey = keyName(1)

func keyName(generation uint64) fsm.Key {
	// Fixed width, so that key order is generation order.
	return fsm.Key{Space: keyPrefix.Space, Resource: keyPrefix.Resource, Name: fmt.Sprintf("%020d", generation)}
}

// KeyBackend is what the key store needs from the replicated state machine.
type KeyBackend interface {
	// Propose replicates cmd through Raft and returns the fsm's result once
	// applied here; a failed precondition is in Result.Err, while an error
	// means the command may not have been applied (not leader, no quorum).
	Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	// List reads this node's applied state without waiting, so that every
	// node verifies tokens with the keys it has applied.
	List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error)
}

// KeySubscriber tells the key store when applied state changes, so that it
// re-reads keys only after a write to them (and tells its listeners).
type KeySubscriber interface {
	// Subscribe adds l to the applied stream; see fsm.Listener.
	Subscribe(l fsm.Listener) (cancel func())
}

// storedKey is the fsm value of one signing key, before it is encrypted
// at rest.
type storedKey struct {
	// Algorithm is the JWS algorithm the key signs with (ES256).
	Algorithm string `json:"alg,omitempty"`
	// PKCS8 is the private key, PKCS #8 DER.
	PKCS8 []byte `json:"pkcs8,omitempty"`
	// Retired marks a tombstone: the key was retired, its bytes are gone
	// and tokens it signed no longer verify. The entry stays so that
	// generations are never reused and FirstKey keeps existing.
	Retired bool `json:"retired,omitempty"`
}

// decodeStoredKey decodes what the key store writes (json.Marshal of a
// storedKey) and nothing looser: field names exactly as written, no
// unknown or duplicate fields. Another object written as JSON under a
// key's name (an API object has apiVersion, kind, metadata) is not a key.
func decodeStoredKey(plain []byte) (storedKey, error) {
	var sk storedKey
	strict, err := kjson.UnmarshalStrict(plain, &sk)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	return sk, err
}

// keySet is one parsed version of the stored keys; immutable once built.
type keySet struct {
	// revs identifies the stored versions it was built from.
	revs string
	// current signs; nil when there are no keys.
	current *ecdsa.PrivateKey
	// public verifies: every stored key, newest first.
	public serviceaccount.PublicKeysGetter
	// signers are the token generators of current, by issuer.
	signers sync.Map // string -> serviceaccount.TokenGenerator
}

// KeyStore holds the ServiceAccount token signing keys in the fsm. It is
// safe for concurrent use.
type KeyStore struct {
	backend KeyBackend
	// atRest encrypts the stored keys (storage.AtRest of secrets).
	atRest storage.AtRest
	// subscribed: version tracks every write to the keys, so a cached set
	// at the current version is fresh. Without it every use lists the keys.
	subscribed bool
	// version counts writes to the keys seen on the applied stream.
	version atomic.Uint64
	mu      sync.Mutex // serialises re-reads
	cur     atomic.Pointer[versionedSet]

	lmu       sync.Mutex
	listeners []serviceaccount.Listener

	// The rotation steps' settings (phases.go).
	tokenLifetime time.Duration
	members       rotation.Applied
	now           func() time.Time

	// catchUp, when set, waits until this node has applied everything the
	// leader had committed when it was called (a read index).
	catchUp func(ctx context.Context) error
	// localFresh, when set, reports whether this node's applied state is within
	// the staleness bound (api.LocalStateFresh); the JWKS is served from
	// local keys only while it holds.
	localFresh func() bool
}

// SetCatchUp gives the store a way to wait until this node has applied
// what the cluster has committed when f is called; f bounds its own wait.
// A token whose key id this node does not hold is looked up again after
// it: a node that has not yet applied a start (a restarted node replaying
// its log, a follower a moment behind) must not refuse a token another
// node already signs with the new key. f is called once per caller, never
// shared here: cluster.ReadIndex already shares its rounds among
// concurrent callers, each joining one that starts after it arrived,
// whereas sharing a call already under way would hand a caller a read
// index taken before it arrived (one that may predate a key's retirement),
// and would fail every caller with the first one's context.
func (k *KeyStore) SetCatchUp(f func(ctx context.Context) error) { k.catchUp = f }

// SetFresh gives the store the staleness rule of local reads. While f
// does not hold, the JWKS is served only after a catch-up (SetCatchUp):
// a node restarted from a snapshot older than a key's start would
// otherwise publish a key set without the key every other node already
// signs with, and a relying party that fetched it refuses those tokens
// until its cache expires (chaos seed 1796249472266586013).
func (k *KeyStore) SetFresh(f func() bool) { k.localFresh = f }

// caughtUp returns once this node's keys may be served: at once while the
// node is fresh (SetFresh) or the request has caught up already
// (WithCaughtUp), otherwise after a catch-up.
func (k *KeyStore) caughtUp(ctx context.Context) error {
	if k.isFresh() || justCaughtUp(ctx) {
		return nil
	}
	return k.catchUpNow(ctx)
}

// isFresh reports whether this node's state is within the staleness
// bound (SetFresh); without a rule it always is.
func (k *KeyStore) isFresh() bool { return k.localFresh == nil || k.localFresh() }

// catchUpNow waits for a catch-up that starts now (SetCatchUp); without
// one set it returns at once.
func (k *KeyStore) catchUpNow(ctx context.Context) error {
	if k.catchUp == nil {
		return nil
	}
	return k.catchUp(ctx)
}

// versionedSet is a key set and the version it was read at.
type versionedSet struct {
	version uint64
	set     *keySet
}

// NewKeyStore reads keys through b. When sub is non-nil the store re-reads
// keys only after they change; otherwise it lists them on every use. The
// keys are stored through atRest, the registry's transformation of
// secrets, so that an encryption configuration for secrets covers them.
func NewKeyStore(b KeyBackend, sub KeySubscriber, atRest storage.AtRest) *KeyStore {
	k := &KeyStore{backend: b, subscribed: sub != nil, atRest: atRest}
	k.version.Store(1)
	if sub != nil {
		sub.Subscribe(keyListener{k})
	}
	return k
}

// keyListener watches the applied stream for writes to the keys.
type keyListener struct{ k *KeyStore }

func (l keyListener) OnApply(events []fsm.Event) {
	for _, ev := range events {
		if ev.KV != nil && ev.KV.Key.Space == keyPrefix.Space && (ev.KV.Key.Resource == keyPrefix.Resource || ev.KV.Key.Resource == phaseKey.Resource) {
			l.k.changed()
			return
		}
	}
}

func (l keyListener) OnIndex(uint64) {}

// OnRestore: a snapshot replaced the state, keys included.
func (l keyListener) OnRestore(uint64) { l.k.changed() }

// changed marks the cached keys stale and tells listeners, off the apply
// path (listeners re-read the keys, which must not block Raft).
func (k *KeyStore) changed() {
	k.version.Add(1)
	k.lmu.Lock()
	ls := append([]serviceaccount.Listener(nil), k.listeners...)
	k.lmu.Unlock()
	if len(ls) > 0 {
		go func() {
			for _, l := range ls {
				l.Enqueue()
			}
		}()
	}
}

// fresh returns the cached set if nothing was written to the keys since it
// was read.
func (k *KeyStore) fresh(v uint64) *keySet {
	if c := k.cur.Load(); k.subscribed && c != nil && c.version == v {
		return c.set
	}
	return nil
}

// keys returns the current parsed keys, re-reading them when they changed.
func (k *KeyStore) keys() (*keySet, error) {
	v := k.version.Load()
	if s := k.fresh(v); s != nil {
		return s, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := k.fresh(v); s != nil {
		return s, nil
	}
	res, err := k.backend.List(keyPrefix, fsm.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("authn: reading signing keys: %w", err)
	}
	rec, recKV, err := k.readRecord()
	if err != nil {
		return nil, err
	}
	revs := ""
	for _, kv := range res.KVs {
		revs += kv.Key.Name + "@" + strconv.FormatUint(kv.ModRevision, 10) + ","
	}
	if recKV != nil {
		revs += "phases@" + strconv.FormatUint(recKV.ModRevision, 10)
	}
	if c := k.cur.Load(); c != nil && c.set.revs == revs {
		k.cur.Store(&versionedSet{version: v, set: c.set})
		return c.set, nil
	}
	entries, err := k.parseEntries(res.KVs)
	if err != nil {
		return nil, err
	}
	// The active key signs; pending, active and retiring keys verify
	// (phases.go), newest first.
	s := &keySet{revs: revs}
	var pubs []interface{}
	for _, e := range derivePhases(entries, rec) {
		if e.phase == "" {
			continue
		}
		if e.phase == rotation.Active {
			s.current = e.priv
		}
		pubs = append(pubs, e.priv.Public())
	}
	s.public, err = serviceaccount.StaticPublicKeysGetter(pubs)
	if err != nil {
		return nil, fmt.Errorf("authn: public keys: %w", err)
	}
	k.cur.Store(&versionedSet{version: v, set: s})
	return s, nil
}

// parseKey decrypts and parses one stored key; a retired key is nil.
func (k *KeyStore) parseKey(kv *fsm.KV) (*ecdsa.PrivateKey, error) {
	plain, _, err := k.atRest.Open(kv)
	if err != nil {
		// Open's error names the key, never its bytes.
		return nil, fmt.Errorf("%w: generation %s: %w", ErrBadKey, kv.Key.Name, err)
	}
	sk, err := decodeStoredKey(plain)
	if err != nil {
		return nil, fmt.Errorf("%w: generation %s", ErrBadKey, kv.Key.Name)
	}
	if sk.Retired {
		return nil, nil
	}
	if sk.Algorithm != "ES256" {
		// The stored algorithm is not quoted: errors never carry stored bytes.
		return nil, fmt.Errorf("%w: generation %s is not an ES256 key", ErrBadKey, kv.Key.Name)
	}
	key, err := x509.ParsePKCS8PrivateKey(sk.PKCS8)
	if err != nil {
		return nil, fmt.Errorf("%w: generation %s", ErrBadKey, kv.Key.Name)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: generation %s is not a P-256 key", ErrBadKey, kv.Key.Name)
	}
	return ec, nil
}

// EnsureKey writes the first signing key unless one exists. It runs on
// the leader at bootstrap and is idempotent; a concurrent writer that wins
// the race is not an error.
func (k *KeyStore) EnsureKey(ctx context.Context) error {
	res, err := k.backend.List(keyPrefix, fsm.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("authn: reading signing keys: %w", err)
	}
	if len(res.KVs) > 0 {
		return nil
	}
	_, err = k.put(ctx, 1)
	if errors.Is(err, ErrKeyConflict) {
		return nil
	}
	return err
}

// Rotate makes a new signing key and promotes it at once (rotation's
// start and promote, forced): it signs every token from then on, and the
// older keys keep verifying the tokens they signed. It must run on the
// leader. It returns the new key's id (the JWT "kid").
func (k *KeyStore) Rotate(ctx context.Context) (string, error) {
	r := k.Root()
	if _, err := r.Start(ctx, rotation.Options{}); err != nil {
		return "", err
	}
	st, err := r.Promote(ctx, rotation.Options{Force: true})
	if err != nil {
		return "", err
	}
	for _, key := range st.Keys {
		if key.Issues {
			return key.ID, nil
		}
	}
	return "", ErrNoSigningKey
}

// put proposes a new P-256 key as generation gen, with MustNotExist.
func (k *KeyStore) put(ctx context.Context, gen uint64) (string, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("authn: generating a signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("authn: encoding a signing key: %w", err)
	}
	val, err := json.Marshal(storedKey{Algorithm: "ES256", PKCS8: der})
	if err != nil {
		return "", fmt.Errorf("authn: encoding a signing key: %w", err)
	}
	key := keyName(gen)
	if val, err = k.atRest.Seal(key, val); err != nil {
		return "", fmt.Errorf("authn: encrypting signing key generation %d: %w", gen, err)
	}
	res, err := k.backend.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: key, Value: val, MustNotExist: true})
	if err != nil {
		return "", fmt.Errorf("authn: writing signing key generation %d: %w", gen, err)
	}
	if errors.Is(res.Err, fsm.ErrExists) {
		return "", fmt.Errorf("%w: generation %d", ErrKeyConflict, gen)
	}
	if res.Err != nil {
		return "", fmt.Errorf("authn: writing signing key generation %d: %w", gen, res.Err)
	}
	return keyID(ctx, priv)
}

// keyID is the JWT "kid" of tokens priv signs.
func keyID(ctx context.Context, priv *ecdsa.PrivateKey) (string, error) {
	pub, err := serviceaccount.StaticPublicKeysGetter([]interface{}{priv.Public()})
	if err != nil {
		return "", err
	}
	return pub.GetPublicKeys(ctx, "")[0].KeyID, nil
}

// Retire removes every retiring key at once (rotation's finish, forced):
// tokens they signed stop verifying on every node once it has applied the
// change (and its token cache, CacheTTL, has expired), and their private
// bytes leave the replicated state. It must run on the leader. It returns
// the current key's id and the removed keys' ids.
func (k *KeyStore) Retire(ctx context.Context) (current string, retired []string, err error) {
	before, err := k.Root().Status(ctx)
	if err != nil {
		return "", nil, err
	}
	after, err := k.Root().Finish(ctx, rotation.Options{Force: true})
	if err != nil {
		return "", nil, err
	}
	for _, key := range before.Keys {
		if key.Phase == rotation.Retiring {
			retired = append(retired, key.ID)
		}
	}
	for _, key := range after.Keys {
		if key.Issues {
			current = key.ID
		}
	}
	if current == "" {
		return "", nil, ErrNoSigningKey
	}
	return current, retired, nil
}

// Reencrypt stores again, with the first provider and key of the
// encryption configuration, every key stored with an older one, and writes
// nothing when none is. It runs on every new leader (a bootstrap task), so
// restarting the nodes after putting a new encryption key first rotates
// the signing keys' encryption, as rewriting all Secrets does for them.
func (k *KeyStore) Reencrypt(ctx context.Context) error {
	res, err := k.backend.List(keyPrefix, fsm.ListOptions{})
	if err != nil {
		return fmt.Errorf("authn: reading signing keys: %w", err)
	}
	for _, kv := range res.KVs {
		plain, stale, err := k.atRest.Open(kv)
		if err != nil {
			return fmt.Errorf("%w: generation %s: %w", ErrBadKey, kv.Key.Name, err)
		}
		if !stale {
			continue
		}
		if err := k.rewrite(ctx, kv, plain); err != nil && !errors.Is(err, ErrKeyConflict) {
			return err
		}
	}
	return nil
}

// rewrite replaces the stored key kv with plain, encrypted, if kv is still
// its current version.
func (k *KeyStore) rewrite(ctx context.Context, kv *fsm.KV, plain []byte) error {
	val, err := k.atRest.Seal(kv.Key, plain)
	if err != nil {
		return fmt.Errorf("authn: encrypting signing key generation %s: %w", kv.Key.Name, err)
	}
	res, err := k.backend.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: kv.Key, Value: val, ModRevision: kv.ModRevision})
	if err != nil {
		return fmt.Errorf("authn: writing signing key generation %s: %w", kv.Key.Name, err)
	}
	if errors.Is(res.Err, fsm.ErrModRevisionMismatch) || errors.Is(res.Err, fsm.ErrNotFound) {
		return fmt.Errorf("%w: generation %s", ErrKeyConflict, kv.Key.Name)
	}
	if res.Err != nil {
		return fmt.Errorf("authn: writing signing key generation %s: %w", kv.Key.Name, res.Err)
	}
	return nil
}

// awaitKey returns once this node has a signing key, or after wait with
// kube's 503 (Retry-After 1): a cluster that is still bootstrapping, or a
// node that has not applied the key yet, cannot sign.
func (k *KeyStore) awaitKey(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		s, err := k.keys()
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if s.current != nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			e := apierrors.NewServiceUnavailable(ErrNoSigningKey.Error())
			e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
			return e
		}
		select {
		case <-ctx.Done():
			return apierrors.NewTimeoutError(ErrNoSigningKey.Error(), 1)
		case <-time.After(keyPoll):
		}
	}
}

// keyPoll is how often awaitKey looks for a key.
const keyPoll = 50 * time.Millisecond

// Generator returns a TokenGenerator that signs with whatever key is
// current when it is called, with issuer iss.
func (k *KeyStore) Generator(iss string) serviceaccount.TokenGenerator {
	return generator{keys: k, iss: iss}
}

type generator struct {
	keys *KeyStore
	iss  string
}

// GenerateToken signs with the newest key this node has applied.
func (g generator) GenerateToken(ctx context.Context, claims *jwt.Claims, private interface{}) (string, error) {
	s, err := g.keys.keys()
	if err != nil {
		return "", err
	}
	if s.current == nil {
		return "", ErrNoSigningKey
	}
	gen, ok := s.signers.Load(g.iss)
	if !ok {
		tg, err := serviceaccount.JWTTokenGenerator(g.iss, s.current)
		if err != nil {
			return "", fmt.Errorf("authn: token signer: %w", err)
		}
		gen, _ = s.signers.LoadOrStore(g.iss, tg)
	}
	return gen.(serviceaccount.TokenGenerator).GenerateToken(ctx, claims, private)
}

// PublicKeys returns the verification keys as kube's PublicKeysGetter.
func (k *KeyStore) PublicKeys() serviceaccount.PublicKeysGetter { return publicKeys{k} }

type publicKeys struct{ k *KeyStore }

// AddListener registers l to be told (asynchronously) when the keys change.
func (p publicKeys) AddListener(l serviceaccount.Listener) {
	p.k.lmu.Lock()
	p.k.listeners = append(p.k.listeners, l)
	p.k.lmu.Unlock()
}

// GetCacheAgeMaxSeconds is kube's value for the discovery documents' max-age.
func (p publicKeys) GetCacheAgeMaxSeconds() int { return 3600 }

// GetPublicKeys returns the keys that may have signed a token with keyID
// (every key when keyID is empty); none while no key has been applied.
//
// A key id this node does not hold is looked up again once the node has
// caught up with the cluster (SetCatchUp), unless it just has
// (freshTokens); concurrent callers share the read index rounds, so
// tokens with made-up key ids cost a few rounds at a time, not one each.
func (p publicKeys) GetPublicKeys(ctx context.Context, keyID string) []serviceaccount.PublicKey {
	got := p.local(ctx, keyID)
	if len(got) > 0 || keyID == "" || p.k.catchUp == nil || justCaughtUp(ctx) {
		return got
	}
	if err := p.k.catchUpNow(ctx); err != nil {
		return nil
	}
	return p.local(ctx, keyID)
}

func (p publicKeys) local(ctx context.Context, keyID string) []serviceaccount.PublicKey {
	s, err := p.k.keys()
	if err != nil || s.public == nil {
		return nil
	}
	return s.public.GetPublicKeys(ctx, keyID)
}
