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

// ServeCustom serves resources, the versions of the definition uid
// (CustomResources), in place of whatever that definition served before;
// nil stops serving it. A version whose resource another definition
// serves already is left to that one, as kube's naming controller keeps
// two definitions from accepting one name. The stores replaced are
// forgotten by the storage layer first, so that the new ones decode the
// resource's values for the watch cache; a request still holding one
// finishes with it. A store the storage layer refuses (a group outside
// the custom key space) serves none of the definition's versions; the
// error says why.
func (r *Registry) ServeCustom(uid types.UID, resources []*Resource) error {
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
	var err error
	for _, res := range resources {
		if next.byGVR[res.GVR] != nil || r.stores[res.GVR] != nil {
			continue
		}
		if other := next.claimedBy(uid, res); other != "" {
			// Another definition serves this stored resource or kind
			// already: first come, first served, as kube's naming
			// controller accepts one of two conflicting names.
			err = fmt.Errorf("%w: %s %s is served by definition %s", ErrNotServable, res.Stored().GroupResource(), res.Kind(), other)
			break
		}
		var s *Store
		if s, err = r.newStore(res, r.adm); err != nil {
			break
		}
		next.byGVR[res.GVR] = s
		next.byUID[uid] = append(next.byUID[uid], s)
	}
	if err != nil {
		for _, s := range next.byUID[uid] {
			delete(next.byGVR, s.GVR)
			r.storage.Forget(s.storage)
		}
		delete(next.byUID, uid)
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
	return err
}

// claimedBy names another definition than self (its UID) whose stores
// already keep res's stored resource or serve its group and kind, or "".
func (set *customSet) claimedBy(self types.UID, res *Resource) types.UID {
	for uid, stores := range set.byUID {
		if uid == self {
			continue
		}
		for _, s := range stores {
			if s.Stored().GroupResource() == res.Stored().GroupResource() || s.Kind() == res.Kind() {
				return uid
			}
		}
	}
	return ""
}

// storesOf returns the stores of the definition uid, nil when the node
// serves none of its versions.
func (c *customStores) storesOf(uid types.UID) []*Store {
	if set := c.set.Load(); set != nil {
		return set.byUID[uid]
	}
	return nil
}
