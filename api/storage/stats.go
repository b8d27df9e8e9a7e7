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
	counters := make(map[storedResource]*int64, len(s.stores))
	for sr := range s.stores {
		counters[sr] = new(int64)
	}
	s.mu.RUnlock()
	// Keys come in space, group, resource order: one lookup per resource.
	var cur storedResource
	var n *int64 // cur's counter; nil for keys of no store (internal ones)
	s.feed.Export().Live(func(kv *fsm.KV) bool {
		if kv.Key.Space != cur.space || kv.Key.Group != cur.gr.Group || kv.Key.Resource != cur.gr.Resource {
			cur = storedResource{space: kv.Key.Space, gr: schema.GroupResource{Group: kv.Key.Group, Resource: kv.Key.Resource}}
			n = counters[cur]
		}
		if n != nil {
			*n++
		}
		return true
	})
	counts := make(map[schema.GroupResource]int64, len(counters))
	for sr, n := range counters {
		// A built-in and a custom resource never share a group and
		// resource (api/registry refuses such a definition), so the
		// figures of kube's gauge, by group and resource, do not mix.
		counts[sr.gr] += *n
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
	for sr := range s.stores {
		out = append(out, sr.gr)
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
