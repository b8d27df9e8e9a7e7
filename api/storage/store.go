package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubestorage "k8s.io/apiserver/pkg/storage"

	"github.com/trustplane/trustplane/fsm"
)

// ResourceConfig is what the storage of one resource needs besides the
// node's Storage.
type ResourceConfig struct {
	// GVR is the served external group/version/resource: the version
	// objects are stored in and list items are written in.
	GVR schema.GroupVersionResource
	// Codec encodes internal objects into their stored encoding (without
	// resourceVersion) and decodes them back.
	Codec runtime.Codec
	// Convertor converts internal objects to GVR's version (ItemJSON).
	Convertor runtime.ObjectConvertor
	// NewFunc returns an empty internal object to decode into.
	NewFunc func() runtime.Object
	// Stored is the group and resource of the keys the objects are kept
	// under, and of their transformation at rest, when the store shares
	// another resource's objects (kube serves events.k8s.io/v1 events from
	// core v1 Event's storage); the zero value is GVR's. Status errors
	// still name GVR's resource, as kube-apiserver's name the resource
	// requested.
	Stored schema.GroupResource
	// TTL, when positive, deletes an object TTL after its last write, as
	// kube-apiserver's etcd lease does (Expiry, ttl.go). The stores that
	// share a Stored resource must agree on it; the first one's wins.
	// Built-in resources only.
	TTL time.Duration
	// Custom keeps the objects in the custom resources' key space
	// (fsm.SpaceCustom): the store of a custom resource. Other stores keep
	// theirs in fsm.SpaceBuiltin, and must be resources the node's
	// Config.Builtin knows. No store reads or writes another space: its
	// keys come from Key and Prefix, and every method refuses any other.
	Custom bool
}

// Store is the storage of one resource: Get, Create, GuaranteedUpdate,
// Delete and GetList on fsm keys, with its codec, its transformation at
// rest and its decoded-object cache, under the node's Storage rules.
//
// Objects handed in are internal (hub) objects; their resourceVersion is
// never stored, and is always set on the way out from the stored
// version's ModRevision. Every error is a Status error.
type Store struct {
	*Storage
	// prefix is the key space, group and resource of the objects' keys,
	// the only keys the store reads and writes (own).
	prefix    fsm.Prefix
	gvr       schema.GroupVersionResource
	codec     runtime.Codec
	convertor runtime.ObjectConvertor
	newFunc   func() runtime.Object
	// atRest encrypts what encode returns before it is proposed and
	// decrypts stored values before they are decoded (atrest.go).
	atRest AtRest
	// objs caches decoded objects by stored version (objcache.go).
	objs objCache
}

// ForResource builds the storage of one resource, in the key space cfg
// says (ResourceConfig.Custom). It fails, wrapping ErrKeySpace, for a
// group that space cannot hold (fsm.Key.Valid), or for a built-in store
// whose resource the node's Config.Builtin does not know: the fsm would
// read its keys back as custom ones.
// The first store of a stored resource decodes its values for the watch
// cache, counts them, and sets their TTL.
func (s *Storage) ForResource(cfg ResourceConfig) (*Store, error) {
	stored := cfg.Stored
	if stored.Empty() {
		stored = cfg.GVR.GroupResource()
	}
	prefix := fsm.Prefix{Group: stored.Group, Resource: stored.Resource}
	if cfg.Custom {
		prefix.Space = fsm.SpaceCustom
	}
	if err := prefix.Valid(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeySpace, stored, err)
	}
	if !cfg.Custom && s.builtin != nil && !s.builtin(stored.Group, stored.Resource) {
		return nil, fmt.Errorf("%w: %s is not a built-in resource of this build", ErrKeySpace, stored)
	}
	if cfg.Custom && cfg.TTL != 0 {
		return nil, fmt.Errorf("%w: %s: custom resources have no TTL", ErrKeySpace, stored)
	}
	st := &Store{Storage: s, prefix: prefix, gvr: cfg.GVR, codec: cfg.Codec, convertor: cfg.Convertor, newFunc: cfg.NewFunc,
		atRest: s.AtRest(stored)}
	s.objs.register(&st.objs)
	sr := storedOf(prefix)
	s.mu.Lock()
	if _, ok := s.stores[sr]; !ok {
		s.stores[sr] = st
		if cfg.TTL > 0 {
			s.ttls[stored] = cfg.TTL
		}
	}
	s.mu.Unlock()
	return st, nil
}

// storedResource names the stored values of one resource: the key space
// and the group and resource of their keys.
type storedResource struct {
	space fsm.Space
	gr    schema.GroupResource
}

func storedOf(p fsm.Prefix) storedResource {
	return storedResource{space: p.Space, gr: schema.GroupResource{Group: p.Group, Resource: p.Resource}}
}

// Key is the key of the named object of the store's resource (namespace
// "" for a cluster-scoped one): in the store's key space, under its
// stored group and resource. The registry builds every key with it.
func (s *Store) Key(namespace, name string) fsm.Key {
	return fsm.Key{Space: s.prefix.Space, Group: s.prefix.Group, Resource: s.prefix.Resource, Namespace: namespace, Name: name}
}

// Prefix selects the store's objects in namespace ("" for all).
func (s *Store) Prefix(namespace string) fsm.Prefix {
	p := s.prefix
	p.Namespace = namespace
	return p
}

// own refuses a key or prefix that is not the store's own: every method
// of Store checks what it is handed, so that no caller can make one
// resource's store read or write another's keys, or another space.
func (s *Store) own(space fsm.Space, group, resource string) error {
	if space != s.prefix.Space || group != s.prefix.Group || resource != s.prefix.Resource {
		return apierrors.NewInternalError(fmt.Errorf("%w: the store of %s was handed a key of %s/%s in the %s space",
			ErrKeySpace, s.gr(), group, resource, space))
	}
	return nil
}

func (s *Store) ownKey(k fsm.Key) error       { return s.own(k.Space, k.Group, k.Resource) }
func (s *Store) ownPrefix(p fsm.Prefix) error { return s.own(p.Space, p.Group, p.Resource) }

// Forget undoes ForResource for st, a store no request uses any more (a
// custom resource no longer served, or served anew): the watch cache
// stops decoding its group/resource's values with it, and its decoded
// objects leave the node's caches. A later ForResource of the same
// group/resource registers afresh.
func (s *Storage) Forget(st *Store) {
	s.mu.Lock()
	for sr, cur := range s.stores {
		if cur == st {
			delete(s.stores, sr)
			if sr.space == fsm.SpaceBuiltin {
				delete(s.ttls, sr.gr)
			}
		}
	}
	s.mu.Unlock()
	s.objs.unregister(&st.objs)
}

func (s *Store) gr() schema.GroupResource { return s.gvr.GroupResource() }

// optimisticLockErrorMsg is kube-apiserver's wording for a stale resourceVersion.
const optimisticLockErrorMsg = "the object has been modified; please apply your changes to the latest version and try again"

// Conflict is kube-apiserver's 409 for a write against a version that is no
// longer current.
func (s *Store) Conflict(name string) error {
	return apierrors.NewConflict(s.gr(), name, errors.New(optimisticLockErrorMsg))
}

// Get returns the object at key, read per the resourceVersion rules
// (Fresh), as a copy the caller may modify; 404 when there is none.
func (s *Store) Get(ctx context.Context, key fsm.Key, resourceVersion string) (runtime.Object, error) {
	if err := s.ownKey(key); err != nil {
		return nil, err
	}
	if err := s.Fresh(ctx, resourceVersion); err != nil {
		return nil, err
	}
	kv, err := s.latest(key)
	if err != nil {
		return nil, err
	}
	return s.Decode(kv)
}

// latest reads the stored version at key in the applied state; 404 when
// there is none.
func (s *Store) latest(key fsm.Key) (*fsm.KV, error) {
	kv, _, err := s.backend.Get(key, 0)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if kv == nil {
		return nil, apierrors.NewNotFound(s.gr(), key.Name)
	}
	return kv, nil
}

// CreateOptions modify a Create.
type CreateOptions struct {
	// DryRun only checks that the key is free, as kube's dry-run storage
	// does, and stores nothing.
	DryRun bool
	// GeneratedName: the name came from generateName, so a taken key is
	// kube's GenerateNameConflict rather than AlreadyExists.
	GeneratedName bool
}

// Create stores obj at key, which must be free: 409 AlreadyExists (saying
// "object is being deleted" when the object there is) otherwise. obj gets
// the resourceVersion it was stored at and is returned.
func (s *Store) Create(ctx context.Context, key fsm.Key, obj runtime.Object, opts CreateOptions) (runtime.Object, error) {
	if err := s.ownKey(key); err != nil {
		return nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if opts.DryRun {
		// Nothing is proposed: the answer is made from the state read,
		// so it stands only once confirmed current (reading.go).
		r := s.Reading(key)
		for {
			kv, err := r.kv(ctx)
			if err != nil {
				return nil, err
			}
			if ok, err := r.Stands(ctx, modRevision(kv)); err != nil {
				return nil, err
			} else if !ok {
				continue
			}
			if kv != nil {
				return nil, s.alreadyExists(kv, key.Name, opts.GeneratedName)
			}
			return obj, nil
		}
	}
	if rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64); err == nil && rv != 0 {
		// kube-apiserver's storage refuses it with this plain error,
		// which its handler answers as a 500 without a reason.
		return nil, kubestorage.ErrResourceVersionSetOnCreate
	}
	data, err := s.encode(obj)
	if err == nil {
		data, err = s.storable(ctx, key, obj, data)
	}
	if err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, &fsm.Command{
		Op: fsm.OpPut, Key: key, Value: data, UID: string(m.GetUID()), MustNotExist: true,
	})
	if err != nil {
		return nil, ProposeErr(err)
	}
	if errors.Is(res.Err, fsm.ErrExists) {
		return nil, s.alreadyExists(res.Prev, key.Name, opts.GeneratedName)
	}
	if res.Err != nil {
		return nil, apierrors.NewInternalError(res.Err)
	}
	setRV(obj, res.Revision)
	return obj, nil
}

func (s *Store) alreadyExists(cur *fsm.KV, name string, generated bool) error {
	if generated {
		return apierrors.NewGenerateNameConflict(s.gr(), name, 1)
	}
	err := apierrors.NewAlreadyExists(s.gr(), name)
	if cur != nil {
		if obj, derr := s.DecodeShared(cur); derr == nil {
			if m, merr := meta.Accessor(obj); merr == nil && m.GetDeletionTimestamp() != nil {
				err.ErrStatus.Message = "object is being deleted: " + err.ErrStatus.Message
			}
		}
	}
	return err
}

// UpdateFunc computes the object to store from cur, the current object (a
// copy it may modify and return). An error ends the update with that
// error. It may run more than once: again on the new current object
// whenever a concurrent write got in between.
type UpdateFunc func(cur runtime.Object) (runtime.Object, error)

// UpdateOptions modify a GuaranteedUpdate.
type UpdateOptions struct {
	// DryRun computes and checks the update and stores nothing; the
	// result carries the current resourceVersion.
	DryRun bool
	// Revision, if set, is the only version the update may apply to: when
	// the current version is another (or changes before the write), the
	// update is a 409 Conflict instead of a retry.
	Revision uint64
	// NoSizeLimit stores the object whatever its size: marking an object
	// for deletion must never make a stored object impossible to delete.
	NoSizeLimit bool
}

// GuaranteedUpdate is kube's read-modify-write loop: it reads the current
// object at key (404 if none), checks preconditions (409 with kube's
// messages), lets tryUpdate compute the new object and proposes it guarded
// by the current version's ModRevision and UID; when another write got in
// between it starts again. An update that changes nothing writes nothing
// and returns the current object, unless the stored value is stale (not
// written with the first configured encryption key): then it is written
// again, as kube's GuaranteedUpdate does, which is how a rewrite of every
// Secret rotates keys.
//
// Every answer it makes without a proposal (404, a failed precondition,
// tryUpdate's error, a no-op, a dry run) is made from a version confirmed
// current by a read index, as kube's refreshes its cached state from etcd
// first (reading.go).
func (s *Store) GuaranteedUpdate(ctx context.Context, key fsm.Key, preconditions *metav1.Preconditions, tryUpdate UpdateFunc, opts UpdateOptions) (runtime.Object, error) {
	r := s.Reading(key)
	for {
		kv, err := r.kv(ctx)
		if err != nil {
			return nil, err
		}
		out, proposed, err := s.updateOnce(ctx, key, kv, preconditions, tryUpdate, opts)
		if !proposed {
			if ok, serr := r.Stands(ctx, modRevision(kv)); serr != nil {
				return nil, serr
			} else if !ok {
				continue
			}
			return out, err
		}
		if errors.Is(err, errStale) {
			r.Judged()
			continue
		}
		return out, err
	}
}

// errStale: the fsm refused an update proposed over a version that is no
// longer current; GuaranteedUpdate reads again and starts over.
var errStale = errors.New("storage: the version read is no longer current")

// updateOnce is one pass of GuaranteedUpdate over kv, the version of key
// read (nil: none). proposed reports whether its answer is the fsm's
// verdict on a proposal rather than one made from kv alone; errStale asks
// for another pass.
func (s *Store) updateOnce(ctx context.Context, key fsm.Key, kv *fsm.KV, preconditions *metav1.Preconditions, tryUpdate UpdateFunc, opts UpdateOptions) (out runtime.Object, proposed bool, err error) {
	if kv == nil {
		return nil, false, apierrors.NewNotFound(s.gr(), key.Name)
	}
	if opts.Revision != 0 && kv.ModRevision != opts.Revision {
		return nil, false, s.Conflict(key.Name)
	}
	cur, err := s.Decode(kv)
	if err != nil {
		return nil, false, err
	}
	if err := CheckPreconditions(s.gr(), key.Name, preconditions, cur); err != nil {
		return nil, false, err
	}
	obj, err := tryUpdate(cur)
	if err != nil {
		return nil, false, err
	}
	data, err := s.encode(obj)
	if err != nil {
		return nil, false, err
	}
	if same, err := s.unchanged(data, kv); err != nil || same {
		// A no-op update keeps the resourceVersion and writes nothing.
		return cur, false, err
	}
	if opts.DryRun {
		setRV(obj, kv.ModRevision)
		return obj, false, nil
	}
	if opts.NoSizeLimit {
		data, err = s.seal(key, data)
	} else {
		data, err = s.storable(ctx, key, obj, data)
	}
	if err != nil {
		return nil, false, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, false, apierrors.NewInternalError(err)
	}
	res, err := s.propose(ctx, &fsm.Command{
		Op: fsm.OpPut, Key: key, Value: data, UID: string(m.GetUID()), ModRevision: kv.ModRevision, MatchUID: kv.UID,
	})
	if err != nil {
		return nil, true, ProposeErr(err)
	}
	switch {
	case res.Err == nil:
		setRV(obj, res.Revision)
		return obj, true, nil
	case errors.Is(res.Err, fsm.ErrNotFound):
		return nil, true, apierrors.NewNotFound(s.gr(), key.Name)
	case errors.Is(res.Err, fsm.ErrModRevisionMismatch), errors.Is(res.Err, fsm.ErrUIDMismatch):
		if opts.Revision != 0 {
			return nil, true, s.Conflict(key.Name)
		}
		return nil, true, errStale
	default:
		return nil, true, apierrors.NewInternalError(res.Err)
	}
}

// Delete removes the object at key if its current version is revision (0:
// whatever version) and returns the revision of the deletion. A missing
// object is 404; another current version is 409 Conflict. Both are the
// fsm's verdicts, made at the deletion's own index.
func (s *Store) Delete(ctx context.Context, key fsm.Key, revision uint64) (uint64, error) {
	if err := s.ownKey(key); err != nil {
		return 0, err
	}
	res, err := s.propose(ctx, &fsm.Command{Op: fsm.OpDelete, Key: key, ModRevision: revision})
	if err != nil {
		return 0, ProposeErr(err)
	}
	switch {
	case res.Err == nil:
		return res.Revision, nil
	case errors.Is(res.Err, fsm.ErrNotFound):
		return 0, apierrors.NewNotFound(s.gr(), key.Name)
	case errors.Is(res.Err, fsm.ErrModRevisionMismatch):
		return 0, s.Conflict(key.Name)
	default:
		return 0, apierrors.NewInternalError(res.Err)
	}
}

// propose hands cmd to the backend and records the write it answers, so
// that this node's next write reads it (reading.go).
func (s *Store) propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	res, err := s.backend.Propose(ctx, cmd)
	if err == nil && res != nil {
		s.answered(res.Revision)
	}
	return res, err
}

// CheckPreconditions applies DeleteOptions or update preconditions to obj
// with kube-apiserver's storage messages: 409 Conflict, "Precondition
// failed: UID in precondition: ..., UID in object meta: ...".
func CheckPreconditions(gr schema.GroupResource, name string, p *metav1.Preconditions, obj runtime.Object) error {
	if p == nil {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if p.UID != nil && *p.UID != m.GetUID() {
		return apierrors.NewConflict(gr, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
		return apierrors.NewConflict(gr, name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}

// ListResult is one page of a list.
type ListResult struct {
	// Items are the selected objects in key order. They are shared
	// decoded objects: read them, copy them by value, never modify them.
	Items []runtime.Object
	// KVs are the stored versions of Items, in order (for ItemJSON).
	KVs []*fsm.KV
	// Revision is the resourceVersion of the list: every page of one list
	// is read at one revision.
	Revision uint64
	// Continue is the token for the next page, "" on the last one.
	Continue string
	// RemainingItemCount counts the items after this page, when the list
	// is unfiltered and paged; nil otherwise.
	RemainingItemCount *int64
}

// Predicate selects objects of a list; nil selects every object.
type Predicate func(obj runtime.Object) (bool, error)

// GetList lists the objects under prefix that match selects, per the
// resourceVersion, continue and limit of opts (ListStart, ListLimit), in
// key order. With a predicate it reads ahead, since the predicate may drop
// items, and then reports no remaining count, as kube does.
func (s *Store) GetList(ctx context.Context, prefix fsm.Prefix, opts *metainternalversion.ListOptions, match Predicate) (ListResult, error) {
	if err := s.ownPrefix(prefix); err != nil {
		return ListResult{}, err
	}
	rev, startAfter, err := s.ListStart(ctx, opts)
	tokenStart := startAfter // where a replacement continue token resumes
	if err != nil {
		return ListResult{}, err
	}
	filtered := match != nil
	limit := ListLimit(opts)
	var (
		items     []runtime.Object
		kvs       []*fsm.KV
		more      bool
		remaining int64
	)
pages:
	for {
		batch := 0
		if limit > 0 {
			batch = limit - len(items)
			if filtered && batch < 64 {
				batch = 64 // read ahead: a selector may drop items
			}
		}
		res, err := s.backend.List(prefix, fsm.ListOptions{Revision: rev, StartAfter: startAfter, Limit: batch})
		if err != nil {
			return ListResult{}, s.ListErr(err, rev, opts.Continue != "", tokenStart)
		}
		rev = res.Revision // every page of one list comes from one revision
		if !filtered && items == nil {
			// Without a selector every item of the page is kept: size the
			// result once instead of growing it.
			items = make([]runtime.Object, 0, len(res.KVs))
			kvs = make([]*fsm.KV, 0, len(res.KVs))
		}
		for i, kv := range res.KVs {
			// Shared, not copied: list items are only read.
			obj, err := s.DecodeShared(kv)
			if err != nil {
				return ListResult{}, err
			}
			if filtered {
				ok, err := match(obj)
				if err != nil {
					return ListResult{}, err
				}
				if !ok {
					continue
				}
			}
			items = append(items, obj)
			kvs = append(kvs, kv)
			if limit > 0 && len(items) == limit {
				left := int64(len(res.KVs) - 1 - i)
				more = left > 0 || res.More
				if res.More {
					left += res.Remaining
				}
				remaining = left
				startAfter = kv.Key.String()
				break pages
			}
		}
		if n := len(res.KVs); n > 0 {
			// Built once per page, not per item.
			startAfter = res.KVs[n-1].Key.String()
		}
		if !res.More {
			break
		}
	}
	out := ListResult{Items: items, KVs: kvs, Revision: rev}
	if more {
		out.Continue = EncodeContinue(rev, startAfter)
		if !filtered && remaining > 0 {
			out.RemainingItemCount = &remaining
		}
	}
	return out, nil
}

// encode serialises obj without its resourceVersion, which is always
// derived from the log index. The result is plain: seal transforms it for
// storage.
func (s *Store) encode(obj runtime.Object) ([]byte, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	rv := m.GetResourceVersion()
	m.SetResourceVersion("")
	defer m.SetResourceVersion(rv)
	var buf bytes.Buffer
	if err := s.codec.Encode(obj, &buf); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return buf.Bytes(), nil
}

// seal transforms plain, the encoded object at key, into the value to propose.
func (s *Store) seal(key fsm.Key, plain []byte) ([]byte, error) {
	out, err := s.atRest.Seal(key, plain)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// storable turns data, obj's encoding, into the value a create or update
// proposes: within MaxObjectBytes (sized), then sealed for storage.
func (s *Store) storable(ctx context.Context, key fsm.Key, obj runtime.Object, data []byte) ([]byte, error) {
	data, err := s.sized(ctx, obj, data)
	if err != nil {
		return nil, err
	}
	return s.seal(key, data)
}

// unchanged reports whether plain, an object re-encoded for an update, is
// what kv already stores, so that the update can write nothing. A value
// stored with a provider or key that is no longer first in the encryption
// configuration is stale and always written again, as kube's
// GuaranteedUpdate does: rewriting unchanged objects rotates keys.
func (s *Store) unchanged(plain []byte, kv *fsm.KV) (bool, error) {
	stored, stale, err := s.atRest.Open(kv)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	return !stale && bytes.Equal(plain, stored), nil
}

// sized returns data, obj's stored encoding, if it is within
// MaxObjectBytes. Otherwise, as kube-apiserver does when etcd refuses an
// object as too large, it drops obj's managedFields, which are safe to lose
// and can be large, and encodes it again; server-side apply
// (WithManagedFieldsKept) keeps them. What still does not fit is refused
// before it is proposed, so it never reaches the Raft log, where every node
// would hold it. kube passes etcd's refusal on as a 500; here it is 413 with
// kube's wording for a body over its limit (docs/COMPATIBILITY.md).
func (s *Store) sized(ctx context.Context, obj runtime.Object, data []byte) ([]byte, error) {
	if s.maxObjectBytes <= 0 || int64(len(data)) <= s.maxObjectBytes {
		return data, nil
	}
	if m, err := meta.Accessor(obj); err == nil && len(m.GetManagedFields()) > 0 && ctx.Value(keepManagedFieldsKey{}) == nil {
		m.SetManagedFields(nil)
		smaller, err := s.encode(obj)
		if err != nil {
			return nil, err
		}
		if int64(len(smaller)) <= s.maxObjectBytes {
			return smaller, nil
		}
	}
	return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", s.maxObjectBytes))
}

type keepManagedFieldsKey struct{}

// WithManagedFieldsKept marks a write whose managedFields must be stored as
// they are or not at all: server-side apply, whose field ownership they
// are. An object too large is then refused rather than stored without them.
func WithManagedFieldsKept(ctx context.Context) context.Context {
	return context.WithValue(ctx, keepManagedFieldsKey{}, true)
}

func setRV(obj runtime.Object, rv uint64) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
	}
}

// RevisionOf is the revision obj's resourceVersion names; 0 if it has none.
func RevisionOf(obj runtime.Object) uint64 {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return n
}

// ProposeErr maps a Propose error to a Status. A write that was certainly
// not applied gets 503 with Retry-After, which client-go retries. One whose
// outcome is unknown gets 504 without Retry-After, saying so: retrying it
// automatically could apply it twice or answer a 409 for the client's own
// write, so the client must look before it writes again.
func ProposeErr(err error) error {
	if errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return apierrors.NewTimeoutError(fmt.Sprintf("the write may or may not have been applied; read the object before writing again: %v", err), 0)
	}
	return Unavailable(err)
}
