package registry

import (
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// customStores are the stores of the custom resources the node serves. A
// request reads the current set without a lock; a change (a definition
// served, changed or deleted) builds a new set and swaps it in, so a
// request keeps the store it found for as long as it runs.
type customStores struct {
	mu  sync.Mutex // serialises changes
	set atomic.Pointer[customSet]
}

// customSet is one immutable generation of the custom stores.
type customSet struct {
	byGVR   map[schema.GroupVersionResource]*Store
	byUID   map[types.UID][]*Store
	ordered []*Store
}

func (c *customStores) store(gvr schema.GroupVersionResource) *Store {
	if set := c.set.Load(); set != nil {
		return set.byGVR[gvr]
	}
	return nil
}

func (c *customStores) all() []*Store {
	if set := c.set.Load(); set != nil {
		return set.ordered
	}
	return nil
}

// ErrNameConflict: a definition's names conflict with those of an older
// definition the node serves (ServeCustom).
var ErrNameConflict = fmt.Errorf("%w: its names conflict with an older definition's", ErrNotServable)

// ServeCustom serves resources, the versions of the definition uid
// (CustomResources), in place of whatever that definition served before;
// nil stops serving it. Two definitions never share a stored resource, a
// kind, or a name clients resolve (plural, singular, short name, kind,
// list kind) in one group: of two that would, the older (by creation
// time, then UID) is served, whatever order they reach the node in, so
// every node serves the same one. A younger definition is refused with
// ErrNameConflict; younger ones served until now are evicted, and their
// UIDs returned, so the caller can try them again once the conflict is
// gone. A version whose resource is served already (a built-in's, or the
// same definition's) is left to that one. The stores replaced are
// forgotten by the storage layer first, so that the new ones decode the
// resource's values for the watch cache; a request still holding one
// finishes with it. A store the storage layer refuses (a group outside
// the custom key space) serves none of the definition's versions; the
// error says why.
func (r *Registry) ServeCustom(uid types.UID, resources []*Resource) (evicted []types.UID, err error) {
	c := r.custom
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.set.Load()
	var replaced []*Store
	next := &customSet{byGVR: map[schema.GroupVersionResource]*Store{}, byUID: map[types.UID][]*Store{}}
	if old != nil {
		for u, stores := range old.byUID {
			if u == uid {
				replaced = stores
				continue
			}
			next.byUID[u] = stores
			for _, s := range stores {
				next.byGVR[s.GVR] = s
			}
		}
	}
	for _, st := range replaced {
		r.storage.Forget(st.storage)
	}
	// Conflicts first: refused, or the younger served ones evicted.
	for _, res := range resources {
		for _, other := range next.conflicting(uid, res) {
			if older(other, res) {
				err = fmt.Errorf("%w: %s %s conflicts with definition %s", ErrNameConflict, res.GroupResource(), res.Kind(), other.Custom.UID)
				break
			}
			if _, ok := next.byUID[other.Custom.UID]; ok {
				evicted = append(evicted, other.Custom.UID)
				next.drop(r, other.Custom.UID)
			}
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		for _, res := range resources {
			if next.byGVR[res.GVR] != nil || r.stores[res.GVR] != nil {
				continue
			}
			var s *Store
			if s, err = r.newStore(res, r.adm); err != nil {
				break
			}
			next.byGVR[res.GVR] = s
			next.byUID[uid] = append(next.byUID[uid], s)
		}
	}
	if err != nil {
		next.drop(r, uid)
	}
	if old != nil {
		for _, s := range old.ordered {
			if next.byGVR[s.GVR] == s {
				next.ordered = append(next.ordered, s)
			}
		}
	}
	next.ordered = append(next.ordered, next.byUID[uid]...)
	c.set.Store(next)
	return evicted, err
}

// drop removes the stores of the definition uid from set, forgotten by
// the storage layer.
func (set *customSet) drop(r *Registry, uid types.UID) {
	for _, s := range set.byUID[uid] {
		delete(set.byGVR, s.GVR)
		r.storage.Forget(s.storage)
	}
	delete(set.byUID, uid)
}

// conflicting returns a store of each definition but self whose stored
// resource is res's, or whose names clash with res's in its group.
func (set *customSet) conflicting(self types.UID, res *Resource) []*Store {
	var out []*Store
	for uid, stores := range set.byUID {
		if uid == self {
			continue
		}
		for _, s := range stores {
			if s.Stored().GroupResource() == res.Stored().GroupResource() || namesClash(s.Resource, res) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// namesClash says whether two custom resources of one group share a name
// clients resolve: a plural, singular or short name, or a kind or list
// kind, as kube's naming controller refuses.
func namesClash(a, b *Resource) bool {
	if a.GVR.Group != b.GVR.Group {
		return false
	}
	names := func(r *Resource) map[string]bool {
		m := map[string]bool{r.GVR.Resource: true, r.Singular: true}
		for _, n := range r.ShortNames {
			m[n] = true
		}
		delete(m, "")
		return m
	}
	an := names(a)
	for n := range names(b) {
		if an[n] {
			return true
		}
	}
	kinds := map[string]bool{a.KindName: true, a.ListKind(): true}
	return kinds[b.KindName] || kinds[b.ListKind()]
}

// older says whether the definition serving a was created before b's (by
// creation time, then UID, so that every node decides alike).
func older(a *Store, b *Resource) bool {
	ta, tb := a.Custom.Created, b.Custom.Created
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.Custom.UID < b.Custom.UID
}

// storesOf returns the stores of the definition uid, nil when the node
// serves none of its versions.
func (c *customStores) storesOf(uid types.UID) []*Store {
	if set := c.set.Load(); set != nil {
		return set.byUID[uid]
	}
	return nil
}
