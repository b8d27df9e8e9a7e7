package storage

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// ObjectCounts counts the live objects of every resource a store was built
// for (ForResource), at this node's applied index: the figures of kube's
// apiserver_storage_objects. It walks a copy-on-write clone of the fsm
// (fsm.Export: O(1) to take, and the walk holds no lock Apply needs), so
// it costs one pass over every stored object and never stalls writes;
// callers bound how often they call it. nil when there is no Feed.
func (s *Storage) ObjectCounts() map[schema.GroupResource]int64 {
	if s.feed == nil {
		return nil
	}
	s.mu.RLock()
	counters := make(map[schema.GroupResource]*int64, len(s.stores))
	for gr := range s.stores {
		counters[gr] = new(int64)
	}
	s.mu.RUnlock()
	// Keys come in group, resource order: one lookup per resource.
	var cur schema.GroupResource
	var n *int64 // cur's counter; nil for keys of no store (internal ones)
	s.feed.Export().Live(func(kv *fsm.KV) bool {
		if kv.Key.Group != cur.Group || kv.Key.Resource != cur.Resource {
			cur = schema.GroupResource{Group: kv.Key.Group, Resource: kv.Key.Resource}
			n = counters[cur]
		}
		if n != nil {
			*n++
		}
		return true
	})
	counts := make(map[schema.GroupResource]int64, len(counters))
	for gr, n := range counters {
		counts[gr] = *n
	}
	return counts
}

// Resources lists the group resources that have a store now (ForResource,
// and not Forgotten since): the resources ObjectCounts counts, and the
// only ones whose figures should be reported.
func (s *Storage) Resources() []schema.GroupResource {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]schema.GroupResource, 0, len(s.stores))
	for gr := range s.stores {
		out = append(out, gr)
	}
	return out
}

// WatchCacheStats reads the node's watch cache figures; false when the
// storage layer serves no watches (no Feed).
func (s *Storage) WatchCacheStats() (watchcache.Stats, bool) {
	if s.watches == nil {
		return watchcache.Stats{}, false
	}
	return s.watches.Stats(), true
}
