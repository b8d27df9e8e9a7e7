package registry

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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	kubestorage "k8s.io/apiserver/pkg/storage"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// optimisticLockErrorMsg is kube-apiserver's wording for a stale resourceVersion.
const optimisticLockErrorMsg = "the object has been modified; please apply your changes to the latest version and try again"

// maxGenerateNameAttempts bounds retries when a generated name collides.
const maxGenerateNameAttempts = 8

// Store runs the generic verbs for one resource against the Backend.
type Store struct {
	*Resource
	backend storage.Backend
	// storage keeps the resourceVersion rules: freshness, continue
	// tokens, compaction errors, the start of a watch.
	storage *storage.Storage
	codec   runtime.Codec
	// admit runs before a create is proposed (namespace lifecycle).
	admit func(ctx context.Context, s *Store, obj runtime.Object) error
	// objs caches decoded objects by stored version (objcache.go).
	objs objCache
	// atRest encrypts what encode returns before it is proposed and
	// decrypts stored values before they are decoded (atrest.go).
	atRest AtRest
	// maxObjectBytes bounds an object's stored encoding; 0 is no bound.
	maxObjectBytes int64
}

func (s *Store) key(ctx context.Context, name string) fsm.Key {
	k := fsm.Key{Group: s.GVR.Group, Resource: s.GVR.Resource, Name: name}
	if s.Namespaced {
		k.Namespace, _ = genericapirequest.NamespaceFrom(ctx)
	}
	return k
}

func (s *Store) prefix(ctx context.Context) fsm.Prefix {
	p := fsm.Prefix{Group: s.GVR.Group, Resource: s.GVR.Resource}
	if s.Namespaced {
		p.Namespace, _ = genericapirequest.NamespaceFrom(ctx)
	}
	return p
}

// decode turns a stored value into an internal object carrying its
// resourceVersion. The object is the caller's to modify: a copy of the
// shared decoded version (objcache.go).
func (s *Store) decode(kv *fsm.KV) (runtime.Object, error) {
	obj, err := s.decodeShared(kv)
	if err != nil {
		return nil, err
	}
	return obj.DeepCopyObject(), nil
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

// proposeErr maps a Propose error to a Status. A write that was certainly
// not applied gets 503 with Retry-After, which client-go retries. One whose
// outcome is unknown gets 504 without Retry-After, saying so: retrying it
// automatically could apply it twice or answer a 409 for the client's own
// write, so the client must look before it writes again.
func proposeErr(err error) error {
	if errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return apierrors.NewTimeoutError(fmt.Sprintf("the write may or may not have been applied; read the object before writing again: %v", err), 0)
	}
	return storage.Unavailable(err)
}

// Get returns the named object, read per the resourceVersion rules.
func (s *Store) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	if err := s.storage.Fresh(ctx, opts.ResourceVersion); err != nil {
		return nil, err
	}
	kv, _, err := s.backend.Get(s.key(ctx, name), 0)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if kv == nil {
		return nil, apierrors.NewNotFound(s.GroupResource(), name)
	}
	return s.decode(kv)
}

// Create stores a new object. Names from generateName are retried on collision.
func (s *Store) Create(ctx context.Context, obj runtime.Object, dryRun bool) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	rest.FillObjectMetaSystemFields(m)
	generated := m.GetGenerateName() != "" && m.GetName() == ""
	if generated {
		m.SetName(s.CreateStrategy.GenerateName(m.GetGenerateName()))
	}
	if s.Resource.Admit != nil {
		if err := s.Resource.Admit(ctx, obj, nil); err != nil {
			return nil, err
		}
	}
	if err := rest.BeforeCreate(s.CreateStrategy, ctx, obj); err != nil {
		return nil, err
	}
	if s.admit != nil {
		if err := s.admit(ctx, s, obj); err != nil {
			return nil, err
		}
	}
	if dryRun {
		// kube's dry-run storage only checks that the name is free.
		kv, _, err := s.backend.Get(s.key(ctx, m.GetName()), 0)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if kv != nil {
			return nil, s.alreadyExists(kv, m.GetName(), generated)
		}
		return obj, nil
	}
	if rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64); err == nil && rv != 0 {
		// kube-apiserver's storage refuses it with this plain error,
		// which its handler answers as a 500 without a reason.
		return nil, kubestorage.ErrResourceVersionSetOnCreate
	}
	for attempt := 1; ; attempt++ {
		key := s.key(ctx, m.GetName())
		data, err := s.encode(obj)
		if err == nil {
			data, err = s.storable(ctx, key, obj, data)
		}
		if err != nil {
			return nil, err
		}
		res, err := s.backend.Propose(ctx, &fsm.Command{
			Op: fsm.OpPut, Key: key, Value: data, UID: string(m.GetUID()), MustNotExist: true,
		})
		if err != nil {
			return nil, proposeErr(err)
		}
		if errors.Is(res.Err, fsm.ErrExists) {
			if generated && attempt < maxGenerateNameAttempts {
				m.SetName(s.CreateStrategy.GenerateName(m.GetGenerateName()))
				continue
			}
			return nil, s.alreadyExists(res.Prev, m.GetName(), generated)
		}
		if res.Err != nil {
			return nil, apierrors.NewInternalError(res.Err)
		}
		setRV(obj, res.Revision)
		return obj, nil
	}
}

func (s *Store) alreadyExists(cur *fsm.KV, name string, generated bool) error {
	if generated {
		return apierrors.NewGenerateNameConflict(s.GroupResource(), name, 1)
	}
	err := apierrors.NewAlreadyExists(s.GroupResource(), name)
	if cur != nil {
		if obj, derr := s.decode(cur); derr == nil {
			if m, merr := meta.Accessor(obj); merr == nil && m.GetDeletionTimestamp() != nil {
				err.ErrStatus.Message = "object is being deleted: " + err.ErrStatus.Message
			}
		}
	}
	return err
}

// Update replaces the named object with objInfo's result. The read-modify-write
// is an optimistic loop: a concurrent write makes it start again, unless the
// caller pinned a resourceVersion, which then conflicts.
func (s *Store) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, dryRun bool) (runtime.Object, error) {
	return s.update(ctx, s.UpdateStrategy, name, objInfo, dryRun)
}

// UpdateSubresource is Update through the subresource sub (status,
// approval, ...), whose strategy keeps the fields it does not own.
func (s *Store) UpdateSubresource(ctx context.Context, sub, name string, objInfo rest.UpdatedObjectInfo, dryRun bool) (runtime.Object, error) {
	strategy := s.Subresources[sub]
	if strategy == nil {
		return nil, apierrors.NewNotFound(s.GroupResource(), name)
	}
	return s.update(ctx, strategy, name, objInfo, dryRun)
}

func (s *Store) update(ctx context.Context, strategy rest.RESTUpdateStrategy, name string, objInfo rest.UpdatedObjectInfo, dryRun bool) (runtime.Object, error) {
	key := s.key(ctx, name)
	for {
		kv, _, err := s.backend.Get(key, 0)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if kv == nil {
			return nil, apierrors.NewNotFound(s.GroupResource(), name)
		}
		old, err := s.decode(kv)
		if err != nil {
			return nil, err
		}
		if err := checkPreconditions(s.GroupResource(), name, objInfo.Preconditions(), old); err != nil {
			return nil, err
		}
		obj, err := objInfo.UpdatedObject(ctx, old)
		if err != nil {
			return nil, err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		pinned := m.GetResourceVersion()
		switch {
		case pinned == "" && !strategy.AllowUnconditionalUpdate():
			// kube-apiserver names the resource, not the kind, and shows the
			// parsed resourceVersion (uint64 0, printed as 0x0).
			qualifiedKind := schema.GroupKind{Group: s.GVR.Group, Kind: s.GVR.Resource}
			return nil, apierrors.NewInvalid(qualifiedKind, name, field.ErrorList{
				field.Invalid(field.NewPath("metadata", "resourceVersion"), uint64(0), "must be specified for an update")})
		case pinned == "":
			// An unconditional update is made against the current object:
			// it carries the current resourceVersion into the strategy's
			// validation, which requires one, as kube-apiserver does.
			m.SetResourceVersion(strconv.FormatUint(kv.ModRevision, 10))
		case pinned != strconv.FormatUint(kv.ModRevision, 10):
			return nil, apierrors.NewConflict(s.GroupResource(), name, errors.New(optimisticLockErrorMsg))
		}
		if s.Resource.Admit != nil {
			if err := s.Resource.Admit(ctx, obj, old); err != nil {
				return nil, err
			}
		}
		if err := rest.BeforeUpdate(strategy, ctx, obj, old); err != nil {
			return nil, err
		}
		if s.shouldDeleteDuringUpdate(obj, old) {
			out, retry, err := s.deleteDuringUpdate(ctx, key, kv, obj, dryRun)
			if retry && pinned == "" {
				continue
			}
			if retry {
				return nil, apierrors.NewConflict(s.GroupResource(), name, errors.New(optimisticLockErrorMsg))
			}
			return out, err
		}
		data, err := s.encode(obj)
		if err != nil {
			return nil, err
		}
		if same, err := s.unchanged(data, kv); err != nil || same {
			// A no-op update keeps the resourceVersion and writes nothing.
			return old, err
		}
		if dryRun {
			setRV(obj, kv.ModRevision)
			return obj, nil
		}
		if data, err = s.storable(ctx, key, obj, data); err != nil {
			return nil, err
		}
		res, err := s.backend.Propose(ctx, &fsm.Command{
			Op: fsm.OpPut, Key: key, Value: data, UID: string(m.GetUID()), ModRevision: kv.ModRevision, MatchUID: kv.UID,
		})
		if err != nil {
			return nil, proposeErr(err)
		}
		switch {
		case res.Err == nil:
			setRV(obj, res.Revision)
			return obj, nil
		case errors.Is(res.Err, fsm.ErrNotFound):
			return nil, apierrors.NewNotFound(s.GroupResource(), name)
		case errors.Is(res.Err, fsm.ErrModRevisionMismatch), errors.Is(res.Err, fsm.ErrUIDMismatch):
			if pinned != "" {
				return nil, apierrors.NewConflict(s.GroupResource(), name, errors.New(optimisticLockErrorMsg))
			}
			continue
		default:
			return nil, apierrors.NewInternalError(res.Err)
		}
	}
}

// shouldDeleteDuringUpdate is kube's rule for an update that removes the last
// finalizer of an object whose deletion is pending without a grace period:
// the update deletes the object instead of storing it.
func (s *Store) shouldDeleteDuringUpdate(obj, old runtime.Object) bool {
	om, err := meta.Accessor(old)
	if err != nil || om.GetDeletionTimestamp() == nil || s.hasFinalizers(obj) {
		return false
	}
	grace := om.GetDeletionGracePeriodSeconds()
	return grace == nil || *grace == 0
}

// deleteDuringUpdate deletes the object an update emptied of finalizers. Like
// kube-apiserver it answers with the updated object, as a PUT client expects.
// retry means kv was no longer current.
func (s *Store) deleteDuringUpdate(ctx context.Context, key fsm.Key, kv *fsm.KV, obj runtime.Object, dryRun bool) (runtime.Object, bool, error) {
	if dryRun {
		return obj, false, nil
	}
	res, err := s.backend.Propose(ctx, &fsm.Command{Op: fsm.OpDelete, Key: key, ModRevision: kv.ModRevision})
	if err != nil {
		return nil, false, proposeErr(err)
	}
	switch {
	case res.Err == nil, errors.Is(res.Err, fsm.ErrNotFound):
		// NotFound: a concurrent update removed the finalizers first.
		return obj, false, nil
	case errors.Is(res.Err, fsm.ErrModRevisionMismatch):
		return nil, true, nil
	default:
		return nil, false, apierrors.NewInternalError(res.Err)
	}
}

// checkPreconditions applies DeleteOptions/UpdatedObjectInfo preconditions
// with kube-apiserver's messages.
func checkPreconditions(gr schema.GroupResource, name string, p *metav1.Preconditions, obj runtime.Object) error {
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

// Delete removes the named object and reports whether it is gone, in the
// order kube-apiserver's generic store keeps:
//   - a deletion already pending answers as a completed request would, and
//     changes nothing (done is false);
//   - an object with finalizers is only marked with a deletionTimestamp and a
//     zero grace period (done is false); the last finalizer's removal deletes it;
//   - a graceful deletion (the strategy's CheckGracefulDelete, e.g. a
//     scheduled pod) records the deletionTimestamp and grace period; with a
//     grace period above zero it stays (done is false), with zero (an
//     unscheduled pod) the marked object is deleted at once, as kube does;
//   - everything else is deleted at once.
//
// Before that, the options' propagation policy (or the legacy
// orphanDependents) sets the orphan or foregroundDeletion finalizer for the
// garbage collector, as kube's deletionFinalizersForGarbageCollection does;
// such a finalizer holds the object like any other.
//
// Preconditions are checked by rest.BeforeDelete, with its messages (or, for
// resources with OwnDeletePreconditions, with the storage layer's), against
// the object read; the mod-revision guard of every proposal makes the check
// hold at the write.
func (s *Store) Delete(ctx context.Context, name string, opts *metav1.DeleteOptions, dryRun bool) (obj runtime.Object, done bool, err error) {
	if s.AdmitDelete != nil {
		if err := s.AdmitDelete(ctx, name); err != nil {
			return nil, false, err
		}
	}
	key := s.key(ctx, name)
	for {
		kv, _, err := s.backend.Get(key, 0)
		if err != nil {
			return nil, false, apierrors.NewInternalError(err)
		}
		if kv == nil {
			return nil, false, apierrors.NewNotFound(s.GroupResource(), name)
		}
		obj, err = s.decode(kv)
		if err != nil {
			return nil, false, err
		}
		beforeOpts := opts
		if s.OwnDeletePreconditions && opts.Preconditions != nil {
			if err := checkPreconditions(s.GroupResource(), name, opts.Preconditions, obj); err != nil {
				return nil, false, err
			}
			beforeOpts = opts.DeepCopy()
			beforeOpts.Preconditions = nil
		}
		graceful, pending, err := rest.BeforeDelete(s.DeleteStrategy, ctx, obj, beforeOpts)
		if err != nil {
			return nil, false, err
		}
		if pending {
			return s.deleted(obj, name), false, nil
		}
		// The options' propagation policy may add or drop the orphan and
		// foregroundDeletion finalizers, which the garbage collector runs.
		gcChanged := s.setGCFinalizers(ctx, obj, opts)
		rev := kv.ModRevision
		marked := false
		finalizing := s.hasFinalizers(obj)
		if !graceful && !finalizing && gcChanged {
			// The options dropped the last finalizer, a garbage
			// collector's: the object goes as stored, with no update
			// first (kube's errDeleteNow).
			if obj, err = s.decode(kv); err != nil {
				return nil, false, err
			}
		}
		if graceful || finalizing {
			if !graceful {
				markAsDeleting(obj, time.Now())
			}
			newRev, retry, err := s.writeDeleting(ctx, key, kv, obj, dryRun)
			if retry {
				continue
			}
			if err != nil {
				return nil, false, err
			}
			if s.hasFinalizers(obj) || (graceful && opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds > 0) {
				return obj, false, nil
			}
			// A graceful deletion with a zero grace period: the object
			// was marked, and now goes.
			if dryRun {
				return obj, true, nil
			}
			rev, marked = newRev, true
		}
		if dryRun {
			return s.deleted(obj, name), true, nil
		}
		res, err := s.backend.Propose(ctx, &fsm.Command{Op: fsm.OpDelete, Key: key, ModRevision: rev})
		if err != nil {
			return nil, false, proposeErr(err)
		}
		switch {
		case res.Err == nil:
			setRV(obj, res.Revision)
			return s.deleted(obj, name), true, nil
		case errors.Is(res.Err, fsm.ErrNotFound) && marked:
			// Someone else finished the deletion we marked: the last
			// state we wrote is the best answer (kube's ignoreNotFound).
			return s.deleted(obj, name), true, nil
		case errors.Is(res.Err, fsm.ErrNotFound):
			return nil, false, apierrors.NewNotFound(s.GroupResource(), name)
		case errors.Is(res.Err, fsm.ErrModRevisionMismatch):
			continue
		default:
			return nil, false, apierrors.NewInternalError(res.Err)
		}
	}
}

// setGCFinalizers is kube's deletionFinalizersForGarbageCollection: it sets
// the orphan and foregroundDeletion finalizers of obj as a deletion with
// opts asks, and reports whether they changed. In order of precedence: the
// legacy orphanDependents, the propagationPolicy, the finalizer obj already
// has, and the strategy's default policy (a strategy without one, like
// every strategy served here, deletes dependents in the background).
func (s *Store) setGCFinalizers(ctx context.Context, obj runtime.Object, opts *metav1.DeleteOptions) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	var policy rest.GarbageCollectionPolicy
	if gs, ok := s.DeleteStrategy.(rest.GarbageCollectionDeleteStrategy); ok {
		policy = gs.DefaultGarbageCollectionPolicy(ctx)
	}
	if policy == rest.Unsupported {
		return false
	}
	orphan, foreground := gcPolicy(opts, m.GetFinalizers(), policy)
	var want []string
	for _, f := range m.GetFinalizers() {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			want = append(want, f)
		}
	}
	if orphan {
		want = append(want, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		want = append(want, metav1.FinalizerDeleteDependents)
	}
	if sets.New(want...).Equal(sets.New(m.GetFinalizers()...)) {
		return false
	}
	m.SetFinalizers(want)
	return true
}

// gcPolicy decides whether a deletion orphans the dependents or deletes them
// in the foreground (kube's shouldOrphanDependents and
// shouldDeleteDependents); neither means in the background.
func gcPolicy(opts *metav1.DeleteOptions, finalizers []string, def rest.GarbageCollectionPolicy) (orphan, foreground bool) {
	//nolint:staticcheck // SA1019: kube-apiserver still honours orphanDependents.
	if opts != nil && opts.OrphanDependents != nil {
		return *opts.OrphanDependents, false //nolint:staticcheck // as above
	}
	if opts != nil && opts.PropagationPolicy != nil {
		switch *opts.PropagationPolicy {
		case metav1.DeletePropagationOrphan:
			return true, false
		case metav1.DeletePropagationForeground:
			return false, true
		case metav1.DeletePropagationBackground:
			return false, false
		}
	}
	for _, f := range finalizers {
		switch f {
		case metav1.FinalizerOrphanDependents:
			return true, false
		case metav1.FinalizerDeleteDependents:
			return false, true
		}
	}
	return def == rest.OrphanDependents, false
}

func (s *Store) hasFinalizers(obj runtime.Object) bool {
	if s.Finalizers != nil && len(s.Finalizers(obj)) > 0 {
		return true
	}
	m, err := meta.Accessor(obj)
	return err == nil && len(m.GetFinalizers()) > 0
}

// markAsDeleting is kube's marking of an object that does not delete
// gracefully but waits for finalizers: generation bumped on the first mark,
// deletionTimestamp now (or kept if earlier), grace period zero.
func markAsDeleting(obj runtime.Object, now time.Time) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if m.GetDeletionTimestamp() == nil && m.GetGeneration() > 0 {
		m.SetGeneration(m.GetGeneration() + 1)
	}
	if ts := m.GetDeletionTimestamp(); ts == nil || ts.After(now) {
		t := metav1.NewTime(now.Truncate(time.Second))
		m.SetDeletionTimestamp(&t)
	}
	zero := int64(0)
	m.SetDeletionGracePeriodSeconds(&zero)
}

// writeDeleting stores obj, already marked for deletion, plus whatever the
// resource's OnDeleting hook sets (namespace phase). Its size is not
// checked: the few bytes of the mark must never make an object that is
// stored impossible to delete. It returns the revision
// of the stored object; retry means kv was no longer current.
func (s *Store) writeDeleting(ctx context.Context, key fsm.Key, kv *fsm.KV, obj runtime.Object, dryRun bool) (uint64, bool, error) {
	if s.OnDeleting != nil {
		s.OnDeleting(obj)
	}
	data, err := s.encode(obj)
	if err != nil {
		return 0, false, err
	}
	if same, err := s.unchanged(data, kv); err != nil || same || dryRun {
		return kv.ModRevision, false, err
	}
	if data, err = s.seal(key, data); err != nil {
		return 0, false, err
	}
	res, err := s.backend.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: key, Value: data, UID: kv.UID, ModRevision: kv.ModRevision})
	if err != nil {
		return 0, false, proposeErr(err)
	}
	if errors.Is(res.Err, fsm.ErrModRevisionMismatch) {
		return 0, true, nil
	}
	if res.Err != nil {
		m, _ := meta.Accessor(obj)
		return 0, false, apierrors.NewNotFound(s.GroupResource(), m.GetName())
	}
	setRV(obj, res.Revision)
	return res.Revision, false, nil
}

// deleted is the response body of a completed delete.
func (s *Store) deleted(obj runtime.Object, name string) runtime.Object {
	if s.ReturnDeletedObject {
		return obj
	}
	m, _ := meta.Accessor(obj)
	return &metav1.Status{
		Status: metav1.StatusSuccess,
		Details: &metav1.StatusDetails{
			Name: name, Group: s.GVR.Group, Kind: s.GVR.Resource, UID: m.GetUID(),
		},
	}
}

// DeleteCollection deletes every object the options select and returns
// them as listed before the deletion, as kube-apiserver does. Objects that
// vanish meanwhile are skipped; any other error stops the deletion.
func (s *Store) DeleteCollection(ctx context.Context, listOpts *metainternalversion.ListOptions, opts *metav1.DeleteOptions, dryRun bool) (runtime.Object, error) {
	listObj, err := s.List(ctx, listOpts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(listObj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	for _, item := range items {
		m, _ := meta.Accessor(item)
		itemCtx := genericapirequest.WithNamespace(ctx, m.GetNamespace())
		// Each delete gets its own options: graceful strategies write the
		// grace period they chose into them.
		if _, _, err := s.Delete(itemCtx, m.GetName(), opts.DeepCopy(), dryRun); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return listObj, nil
}

// List returns the objects the options select, ordered by namespace and name.
func (s *Store) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	list, _, err := s.ListVersions(ctx, opts)
	return list, err
}

// ListVersions is List that also returns the stored version of each item, in
// order, so that the response can be written from per-version caches
// (WriteListJSON).
func (s *Store) ListVersions(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, []*fsm.KV, error) {
	label := labels.Everything()
	if opts.LabelSelector != nil {
		label = opts.LabelSelector
	}
	fieldSel := fields.Everything()
	if opts.FieldSelector != nil {
		fieldSel = opts.FieldSelector
	}
	rev, startAfter, err := s.storage.ListStart(ctx, opts)
	tokenStart := startAfter // where a replacement continue token resumes
	if err != nil {
		return nil, nil, err
	}
	filtered := !label.Empty() || !fieldSel.Empty()
	limit := storage.ListLimit(opts)
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
		res, err := s.backend.List(s.prefix(ctx), fsm.ListOptions{Revision: rev, StartAfter: startAfter, Limit: batch})
		if err != nil {
			return nil, nil, s.storage.ListErr(err, rev, opts.Continue != "", tokenStart)
		}
		rev = res.Revision // every page of one list comes from one revision
		for i, kv := range res.KVs {
			// Shared, not copied: list items are only read (meta.SetList
			// copies each by value into the list).
			obj, err := s.decodeShared(kv)
			if err != nil {
				return nil, nil, err
			}
			ok, err := s.matches(obj, label, fieldSel)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				continue
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
	list := s.NewListFunc()
	if err := meta.SetList(list, items); err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	lm.SetResourceVersion(strconv.FormatUint(rev, 10))
	if more {
		lm.SetContinue(storage.EncodeContinue(rev, startAfter))
		if !filtered && remaining > 0 {
			lm.SetRemainingItemCount(&remaining)
		}
	}
	return list, kvs, nil
}

func (s *Store) matches(obj runtime.Object, label labels.Selector, field fields.Selector) (bool, error) {
	if label.Empty() && field.Empty() {
		return true, nil
	}
	ls, fs, err := s.GetAttrs(obj)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	return label.Matches(ls) && field.Matches(fs), nil
}

// Prefix is the fsm prefix of this resource in the context's namespace (all
// namespaces when the context has none), for watches.
func (s *Store) Prefix(ctx context.Context) fsm.Prefix { return s.prefix(ctx) }

// Predicate returns the selector test a watch applies to decoded objects;
// nil when the options select everything.
func (s *Store) Predicate(opts *metainternalversion.ListOptions) func(any) (bool, error) {
	label, field := labels.Everything(), fields.Everything()
	if opts.LabelSelector != nil {
		label = opts.LabelSelector
	}
	if opts.FieldSelector != nil {
		field = opts.FieldSelector
	}
	if label.Empty() && field.Empty() {
		return nil
	}
	return func(obj any) (bool, error) {
		o, ok := obj.(runtime.Object)
		if !ok {
			return false, fmt.Errorf("watch: unexpected object %T", obj)
		}
		return s.matches(o, label, field)
	}
}

// WatchStart resolves where a watch with opts starts (storage.WatchStart):
// after revision start, with the state at it first when initial is set.
func (s *Store) WatchStart(ctx context.Context, opts *metainternalversion.ListOptions) (start uint64, initial bool, err error) {
	return s.storage.WatchStart(ctx, opts)
}
