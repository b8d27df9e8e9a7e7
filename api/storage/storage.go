package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubestorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// Backend is what the storage layer needs from the replicated state
// machine. It is declared here, where it is used, so that storage depends
// on these behaviours and not on the node that provides them.
type Backend interface {
	// Propose replicates cmd and returns the fsm's result once it has been
	// applied on this node. A failed precondition is reported in Result.Err,
	// not as the error. An error wrapping ErrOutcomeUnknown means the
	// command may or may not have been applied; any other error means it was
	// not, so the client may be told to retry. The distinction matters
	// because client-go retries every answer that carries Retry-After, and a
	// retried write that had in fact committed meets itself (409).
	Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	// ReadIndex returns an index at least as new as every write acknowledged
	// before the call, once this node has applied it; reads served after it
	// are linearizable.
	ReadIndex(ctx context.Context) (uint64, error)
	// WaitApplied blocks until this node has applied index, so that reads
	// "not older than" index can be served locally.
	WaitApplied(ctx context.Context, index uint64) error
	// AppliedIndex is the index of the last entry this node has applied:
	// the newest revision readable here. It never waits.
	AppliedIndex() uint64
	// Get and List read this node's applied state without waiting.
	Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error)
	List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error)
}

// Sentinel errors. Everything the storage layer returns to the registry is
// a Status error; these are what it is handed or hands to its other users.
var (
	// ErrOutcomeUnknown is wrapped by a Backend.Propose error when the
	// command may or may not have been applied (the node lost leadership
	// or its wait ended, and the log could not tell in time). ProposeErr
	// answers it with 504 without Retry-After.
	ErrOutcomeUnknown = errors.New("storage: the write may or may not have been applied")
	// ErrAtRest: a value could not be encrypted for storage or decrypted
	// from it (a key missing from the encryption configuration, or a
	// corrupt value). The message names the key, never the value.
	ErrAtRest = errors.New("storage: at-rest transformation of a stored value failed")
	// ErrNoResource: the watch cache met a stored value of a resource no
	// store was built for (ForResource), so it cannot be decoded.
	ErrNoResource = errors.New("storage: no store for the stored value's resource")
	// ErrUndecodable: a stored value cannot be decoded with its store's
	// codec. The error names the object, never what the value holds.
	ErrUndecodable = errors.New("storage: the stored value cannot be decoded")
	// ErrKeySpace: a store was asked to build or use a key outside its
	// resource's key space (fsm.Space), which the storage layer alone
	// chooses.
	ErrKeySpace = errors.New("storage: key outside the store's key space")
)

// Config configures a Storage.
type Config struct {
	// FreshWait bounds how long a read waits for a resourceVersion this node
	// has not applied yet (kube-apiserver waits 3 s).
	FreshWait time.Duration
	// NoIdleSweep keeps decoded objects in the object caches until the
	// budget or a newer version evicts them, without the idle sweep
	// (idleSweepInterval): for a test that holds a shared object for
	// seconds and checks that every reader was handed that same object.
	NoIdleSweep bool
	// Transformers encrypt stored values at rest, per resource: kube's
	// encryptionconfig.StaticTransformers from an EncryptionConfiguration.
	// nil stores values as encoded (kube's identity provider).
	Transformers value.ResourceTransformers
	// MaxObjectBytes bounds the stored (protobuf) encoding of an object; a
	// create or update that would store more gets 413 before anything is
	// proposed. 0 is no bound. The default is etcd's request limit, which
	// bounds kube-apiserver's objects: 1.5 MiB.
	MaxObjectBytes int64
	// Feed is the fsm whose applied stream feeds the node's watch cache,
	// which the storage layer builds and alone reads (Store.Watch). nil
	// serves no watches: Watch answers 405, as for a resource without the
	// verb.
	Feed *fsm.FSM
	// Builtin is the binary's list of built-in resources, the one the
	// fsm classifies untagged keys with (fsm.Config.Builtin): a built-in
	// store of a resource it does not know is refused (ForResource), since
	// the fsm would read its keys back as custom ones. Nil checks nothing
	// (tests).
	Builtin fsm.Builtin
	// SealedInternal are the internal resources whose records hold secret
	// material and are sealed as Secrets are (the token signing keys, the
	// gossip keyring, the node CAs); every other internal record (removal
	// markers, data-directory records) is stored in the clear, and
	// AtRestOf says so.
	SealedInternal []string
	// Watch configures that watch cache; nil is watchcache.DefaultConfig().
	// Its Decode is the storage layer's own (the shared decoded objects of
	// every resource), whatever is set here.
	Watch *watchcache.Config
}

// DefaultMaxObjectBytes is etcd's default request limit (--max-request-bytes).
const DefaultMaxObjectBytes = 3 << 19

// DefaultConfig returns kube-apiserver's defaults.
func DefaultConfig() *Config {
	return &Config{FreshWait: 3 * time.Second, MaxObjectBytes: DefaultMaxObjectBytes}
}

// Storage is one node's storage layer over its Backend: the rules every
// resource shares.
type Storage struct {
	// stopSweep ends the object caches' idle sweep (Close).
	stopSweep chan struct{}
	closeOnce sync.Once

	backend      Backend
	freshWait    time.Duration
	transformers value.ResourceTransformers
	// maxObjectBytes bounds an object's stored encoding; 0 is no bound.
	maxObjectBytes int64
	// watches is the node's watch cache; nil when there is no Feed.
	watches *watchcache.Cache
	// feed is Config.Feed, which ObjectCounts reads (stats.go).
	feed *fsm.FSM
	// builtin is Config.Builtin.
	builtin fsm.Builtin
	// sealedInternal is Config.SealedInternal.
	sealedInternal map[string]bool

	// mu guards stores, the resources' storage by group and resource: the
	// first registered for a group/resource decodes its stored values for
	// the watch cache (every version of a resource stores one encoding).
	mu     sync.RWMutex
	stores map[storedResource]*Store
	// ttls are the TTLs of the stored resources that have one (ttl.go),
	// also under mu; built-in resources only.
	ttls map[schema.GroupResource]time.Duration
	// itemEncodings counts the bytes of list-item encodings the object
	// caches of every resource hold (objcache.go), against
	// maxItemEncodings (maxItemEncodingBytes; tests lower it).
	itemEncodings    atomic.Int64
	maxItemEncodings int64
	// objs bounds the decoded objects the stores' caches hold
	// (objcache.go).
	objs objBudget
	// ownWrites is the newest revision of a write this node has answered
	// (reading.go).
	ownWrites atomic.Uint64
}

// New builds the storage layer over backend and, given a Feed, the node's
// watch cache fed from it. cfg nil means DefaultConfig(). It fails only on
// a watch configuration watchcache refuses.
func New(cfg *Config, backend Backend) (*Storage, error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	s := &Storage{backend: backend, freshWait: cfg.FreshWait, transformers: cfg.Transformers, maxObjectBytes: cfg.MaxObjectBytes,
		stores: map[storedResource]*Store{}, ttls: map[schema.GroupResource]time.Duration{}, maxItemEncodings: maxItemEncodingBytes, feed: cfg.Feed,
		builtin: cfg.Builtin, sealedInternal: map[string]bool{}}
	for _, r := range cfg.SealedInternal {
		s.sealedInternal[r] = true
	}
	s.objs.max, s.objs.enc = maxCachedObjectBytes, &s.itemEncodings
	s.stopSweep = make(chan struct{})
	if !cfg.NoIdleSweep {
		go s.objs.sweepIdleLoop(s.stopSweep)
	}
	if cfg.Feed != nil {
		wcfg := watchcache.DefaultConfig()
		if cfg.Watch != nil {
			c := *cfg.Watch
			wcfg = &c
		}
		wcfg.Decode = s.decodeShared
		wc, err := watchcache.New(wcfg, cfg.Feed)
		if err != nil {
			return nil, fmt.Errorf("watch cache: %w", err)
		}
		s.watches = wc
	}
	return s, nil
}

// Close stops the watch cache (every watch ends) and the object caches'
// idle sweep. It may be called more than once.
func (s *Storage) Close() {
	s.closeOnce.Do(func() {
		close(s.stopSweep)
		if s.watches != nil {
			s.watches.Close()
		}
	})
}

// decodeShared decodes a stored value of any resource into the shared,
// immutable object of its resource's store (objcache.go), so that a
// version watched and read is decoded once and held once on this node.
func (s *Storage) decodeShared(kv *fsm.KV) (any, error) {
	s.mu.RLock()
	st := s.stores[storedResource{space: kv.Key.Space, gr: schema.GroupResource{Group: kv.Key.Group, Resource: kv.Key.Resource}}]
	s.mu.RUnlock()
	if st == nil {
		return nil, fmt.Errorf("%w: %s/%s in the %s space", ErrNoResource, kv.Key.Group, kv.Key.Resource, kv.Key.Space)
	}
	return st.DecodeShared(kv)
}

// Backend returns the backend the storage layer reads and writes.
func (s *Storage) Backend() Backend { return s.backend }

// Applied is this node's applied index: the resourceVersion of the newest
// state it can serve, and the "current" of a 504.
func (s *Storage) Applied() uint64 { return s.backend.AppliedIndex() }

// Fresh makes this node's state suitable for a read at resourceVersion rv:
// "" is linearizable (read index), "0" is local, N waits until N is applied
// (WaitFor).
func (s *Storage) Fresh(ctx context.Context, rv string) error {
	switch rv {
	case "0":
		return nil
	case "":
		_, err := s.ReadIndex(ctx)
		return err
	}
	n, err := ParseResourceVersion(rv)
	if err != nil {
		return err
	}
	return s.WaitFor(ctx, n)
}

// ReadIndex is a linearizable read barrier: once it returns, this node has
// applied every write acknowledged before the call, and the index is the
// revision a consistent watch or list starts from. A node that cannot get
// one (no leader) answers 503 with Retry-After.
func (s *Storage) ReadIndex(ctx context.Context) (uint64, error) {
	idx, err := s.backend.ReadIndex(ctx)
	if err != nil {
		return 0, Unavailable(err)
	}
	return idx, nil
}

// WaitFor waits, bounded by Config.FreshWait, until this node has applied
// rev. A node still behind then answers kube-apiserver's 504 "Too large
// resource version" with Retry-After 1.
func (s *Storage) WaitFor(ctx context.Context, rev uint64) error {
	if err := s.waitApplied(ctx, rev); err != nil {
		return s.TooLarge(rev)
	}
	return nil
}

// waitApplied waits until this node has applied rev, at most FreshWait:
// the one bound on how long a request waits for this node's state.
func (s *Storage) waitApplied(ctx context.Context, rev uint64) error {
	wctx, cancel := context.WithTimeout(ctx, s.freshWait)
	defer cancel()
	return s.backend.WaitApplied(wctx, rev)
}

// TooLarge is kube-apiserver's answer to a read at rev, which this node has
// not applied: 504, Retry-After 1, a ResourceVersionTooLarge cause, and the
// node's applied index as "current".
func (s *Storage) TooLarge(rev uint64) error {
	return kubestorage.NewTooLargeResourceVersionError(rev, s.Applied(), 1)
}

// Unavailable is the answer to a request this node cannot serve now (no
// leader, no quorum): 503 with Retry-After 1, which client-go retries.
func Unavailable(err error) error {
	e := apierrors.NewServiceUnavailable(fmt.Sprintf("the cluster cannot serve the request right now: %v", err))
	e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return e
}
