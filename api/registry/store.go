package registry

import (
	"context"
	"errors"
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

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// maxGenerateNameAttempts bounds retries when a generated name collides.
const maxGenerateNameAttempts = 8

// Store runs the generic verbs for one resource, in kube's order, on its
// storage (api/storage), which alone reads and writes the fsm.
type Store struct {
	*Resource
	// storage reads and writes the resource's objects and keeps the
	// resourceVersion rules.
	storage *storage.Store
	// admit runs before a create is proposed (namespace lifecycle).
	admit func(ctx context.Context, s *Store, obj runtime.Object) error
	// chain is the store's admission (admission.go), fixed when the
	// registry built it.
	chain []AdmitFunc
	// deleteChain is the store's admission of deletes (admission.go).
	deleteChain []AdmitDeleteFunc
	// validateChain is the store's validating admission, after the
	// strategy (admission.go).
	validateChain []ValidateFunc
}

// key is the named object's key, which the storage layer builds: the
// store's key space and stored resource, the request's namespace.
func (s *Store) key(ctx context.Context, name string) fsm.Key {
	return s.storage.Key(s.namespace(ctx), name)
}

func (s *Store) prefix(ctx context.Context) fsm.Prefix {
	return s.storage.Prefix(s.namespace(ctx))
}

// namespace is the request's namespace, or "" for a cluster-scoped resource.
func (s *Store) namespace(ctx context.Context) string {
	if !s.Namespaced {
		return ""
	}
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return ns
}

// Get returns the named object, read per the resourceVersion rules.
func (s *Store) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	return s.storage.Get(ctx, s.key(ctx, name), opts.ResourceVersion)
}

// Create stores a new object. Names from generateName are retried on collision.
func (s *Store) Create(ctx context.Context, obj runtime.Object, dryRun bool) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	// kube's order: mutating admission sees the object as the client
	// sent it (no uid, no creation time, a generateName not yet
	// resolved), and the system fields are filled after it, so that no
	// plugin or webhook can choose them: a uid chosen by a webhook could
	// be a deleted object's, whose bound tokens would then be valid again.
	if err := s.admitWrite(ctx, obj, nil); err != nil {
		return nil, err
	}
	rest.FillObjectMetaSystemFields(m)
	generated := m.GetGenerateName() != "" && m.GetName() == ""
	if generated {
		m.SetName(s.CreateStrategy.GenerateName(m.GetGenerateName()))
	}
	if err := rest.BeforeCreate(s.CreateStrategy, ctx, obj); err != nil {
		return nil, err
	}
	if s.admit != nil {
		if err := s.admit(ctx, s, obj); err != nil {
			return nil, err
		}
	}
	if err := s.validateWrite(ctx, obj, nil, dryRun); err != nil {
		return nil, err
	}
	opts := storage.CreateOptions{DryRun: dryRun, GeneratedName: generated}
	for attempt := 1; ; attempt++ {
		out, err := s.storage.Create(ctx, s.key(ctx, m.GetName()), obj, opts)
		if err != nil && generated && !dryRun && attempt < maxGenerateNameAttempts && apierrors.IsAlreadyExists(err) {
			m.SetName(s.CreateStrategy.GenerateName(m.GetGenerateName()))
			continue
		}
		return out, err
	}
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

// errEmptiedFinalizers ends an update attempt whose object must be deleted
// instead of stored (shouldDeleteDuringUpdate), as kube's generic store does.
var errEmptiedFinalizers = errors.New("registry: the update removed the last finalizer of an object being deleted")

// Reapplied is implemented by an update computed from whatever object is
// current (a patch, a server-side apply), which may leave the
// resourceVersion empty so that the store's loop can re-apply it to a
// newer object. ReappliesToCurrent reports whether the update is one: its
// empty resourceVersion then stands for the current object's, as kube's
// patch handler applies a patch to the current object, resourceVersion
// included, so a strategy that refuses unconditional updates (admission
// policies, ClusterTrustBundles) still takes it. A PUT without a
// resourceVersion is not one.
type Reapplied interface {
	// ReappliesToCurrent reports whether UpdatedObject computes the
	// object from the one it is given, so that an empty resourceVersion
	// it returns means that object's. A wrapper must answer for what it
	// wraps.
	ReappliesToCurrent() bool
}

// reapplies reports whether info is a Reapplied update.
func reapplies(info rest.UpdatedObjectInfo) bool {
	r, ok := info.(Reapplied)
	return ok && r.ReappliesToCurrent()
}

func (s *Store) update(ctx context.Context, strategy rest.RESTUpdateStrategy, name string, objInfo rest.UpdatedObjectInfo, dryRun bool) (runtime.Object, error) {
	key := s.key(ctx, name)
	for {
		var (
			pinned     string         // the client's resourceVersion
			emptied    runtime.Object // the object to delete instead
			emptiedRev uint64         // the version it replaces
		)
		out, err := s.storage.GuaranteedUpdate(ctx, key, objInfo.Preconditions(), func(old runtime.Object) (runtime.Object, error) {
			obj, err := objInfo.UpdatedObject(ctx, old)
			if err != nil {
				return nil, err
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			om, err := meta.Accessor(old)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			pinned = m.GetResourceVersion()
			switch {
			case pinned == "" && !strategy.AllowUnconditionalUpdate() && !reapplies(objInfo):
				// kube-apiserver names the resource, not the kind, and shows the
				// parsed resourceVersion (uint64 0, printed as 0x0).
				qualifiedKind := schema.GroupKind{Group: s.GVR.Group, Kind: s.GVR.Resource}
				return nil, apierrors.NewInvalid(qualifiedKind, name, field.ErrorList{
					field.Invalid(field.NewPath("metadata", "resourceVersion"), uint64(0), "must be specified for an update")})
			case pinned == "":
				// An unconditional update is made against the current object:
				// it carries the current resourceVersion into the strategy's
				// validation, which requires one, as kube-apiserver does.
				m.SetResourceVersion(om.GetResourceVersion())
			case pinned != om.GetResourceVersion():
				return nil, s.storage.Conflict(name)
			}
			if err := s.admitWrite(ctx, obj, old); err != nil {
				return nil, err
			}
			if err := rest.BeforeUpdate(strategy, ctx, obj, old); err != nil {
				return nil, err
			}
			if err := s.validateWrite(ctx, obj, old, dryRun); err != nil {
				return nil, err
			}
			if s.shouldDeleteDuringUpdate(obj, old) {
				emptied, emptiedRev = obj, storage.RevisionOf(old)
				return nil, errEmptiedFinalizers
			}
			return obj, nil
		}, storage.UpdateOptions{DryRun: dryRun})
		if !errors.Is(err, errEmptiedFinalizers) {
			return out, err
		}
		// Like kube-apiserver, answer with the updated object, as a PUT
		// client expects.
		if dryRun {
			return emptied, nil
		}
		_, err = s.storage.Delete(ctx, key, emptiedRev)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			// NotFound: a concurrent update removed the finalizers first.
			return emptied, nil
		case apierrors.IsConflict(err) && pinned == "":
			continue
		default:
			return nil, err
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
	r := s.storage.Reading(key)
	for {
		cur, err := r.Object(ctx) // shared: copied before any change
		if err != nil {
			return nil, false, err
		}
		obj, done, proposed, err := s.deleteOnce(ctx, key, name, cur, opts, dryRun)
		switch {
		case errors.Is(err, errChanged):
			// The object changed since it was read; this node has applied
			// the change (storage.Reading.Judged).
			r.Judged()
			continue
		case !proposed:
			// An answer made from the object read alone stands only if
			// that is still the current version (storage/reading.go).
			if ok, serr := r.Stands(ctx, storage.RevisionOf(cur)); serr != nil {
				return nil, false, serr
			} else if !ok {
				continue
			}
		}
		return obj, done, err
	}
}

// errChanged: a deletion's proposal met a newer version than the one read;
// Delete reads again.
var errChanged = errors.New("registry: the object changed while it was being deleted")

// deleteOnce is one pass of Delete over cur, the object read from this
// node's state (nil: none). proposed reports whether its answer comes from
// the fsm's verdict on a proposal rather than from cur alone.
func (s *Store) deleteOnce(ctx context.Context, key fsm.Key, name string, cur runtime.Object, opts *metav1.DeleteOptions, dryRun bool) (obj runtime.Object, done, proposed bool, err error) {
	if cur == nil {
		return nil, false, false, apierrors.NewNotFound(s.GroupResource(), name)
	}
	obj = cur.DeepCopyObject()
	beforeOpts := opts
	if s.OwnDeletePreconditions && opts.Preconditions != nil {
		if err := storage.CheckPreconditions(s.GroupResource(), name, opts.Preconditions, obj); err != nil {
			return nil, false, false, err
		}
		beforeOpts = opts.DeepCopy()
		beforeOpts.Preconditions = nil
	}
	graceful, pending, err := rest.BeforeDelete(s.DeleteStrategy, ctx, obj, beforeOpts)
	if err != nil {
		return nil, false, false, err
	}
	if pending {
		return s.deleted(obj, name), false, false, nil
	}
	if err := s.admitDelete(ctx, cur.DeepCopyObject(), opts, dryRun); err != nil {
		return nil, false, false, err
	}
	// The options' propagation policy may add or drop the orphan and
	// foregroundDeletion finalizers, which the garbage collector runs.
	gcChanged := s.setGCFinalizers(ctx, obj, opts)
	rev := storage.RevisionOf(cur)
	marked := false
	finalizing := s.hasFinalizers(obj)
	if !graceful && !finalizing && gcChanged {
		// The options dropped the last finalizer, a garbage
		// collector's: the object goes as stored, with no update
		// first (kube's errDeleteNow).
		obj = cur.DeepCopyObject()
	}
	if graceful || finalizing {
		if !graceful {
			markAsDeleting(obj, time.Now())
		}
		newRev, err := s.writeDeleting(ctx, key, rev, obj, dryRun)
		if apierrors.IsConflict(err) {
			return nil, false, true, errChanged
		}
		if err != nil {
			return nil, false, !dryRun, err
		}
		if s.hasFinalizers(obj) || (graceful && opts.GracePeriodSeconds != nil && *opts.GracePeriodSeconds > 0) {
			return obj, false, !dryRun, nil
		}
		// A graceful deletion with a zero grace period: the object
		// was marked, and now goes.
		if dryRun {
			return obj, true, false, nil
		}
		rev, marked = newRev, true
	}
	if dryRun {
		return s.deleted(obj, name), true, false, nil
	}
	deletedAt, err := s.storage.Delete(ctx, key, rev)
	switch {
	case err == nil:
		if m, merr := meta.Accessor(obj); merr == nil {
			m.SetResourceVersion(storage.FormatResourceVersion(deletedAt))
		}
		return s.deleted(obj, name), true, true, nil
	case apierrors.IsNotFound(err) && marked:
		// Someone else finished the deletion we marked: the last
		// state we wrote is the best answer (kube's ignoreNotFound).
		return s.deleted(obj, name), true, true, nil
	case apierrors.IsConflict(err):
		return nil, false, true, errChanged
	default:
		return nil, false, true, err
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
// resource's OnDeleting hook sets (namespace phase), over the version rev
// it was read at. Its size is not checked: the few bytes of the mark must
// never make an object that is stored impossible to delete. It returns the
// revision of the stored object (rev when nothing changed); a Conflict
// means rev was no longer current.
func (s *Store) writeDeleting(ctx context.Context, key fsm.Key, rev uint64, obj runtime.Object, dryRun bool) (uint64, error) {
	if s.OnDeleting != nil {
		s.OnDeleting(obj)
	}
	out, err := s.storage.GuaranteedUpdate(ctx, key, nil, func(runtime.Object) (runtime.Object, error) { return obj, nil },
		storage.UpdateOptions{DryRun: dryRun, Revision: rev, NoSizeLimit: true})
	if err != nil {
		return 0, err
	}
	return storage.RevisionOf(out), nil
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
	page, err := s.ListPage(ctx, opts)
	if err != nil {
		return nil, err
	}
	return page.Object()
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

// Watch starts a watch of this resource in the context's namespace (all
// namespaces when it has none) with opts' selectors, resourceVersion and
// bookmarks (storage.Store.Watch, whose errors it returns: a 410 is for an
// ERROR event, not an HTTP error). The events' objects are shared: the
// caller must copy one before changing it.
func (s *Store) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (*watchcache.Watcher, error) {
	return s.storage.Watch(ctx, s.prefix(ctx), s.predicate(opts), opts)
}

// predicate is the label and field selector test of opts; nil when they
// select everything, so that nothing is decoded for the selector's sake.
func (s *Store) predicate(opts *metainternalversion.ListOptions) storage.Predicate {
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
	return func(obj runtime.Object) (bool, error) { return s.matches(obj, label, field) }
}
