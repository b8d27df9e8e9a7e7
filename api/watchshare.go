package api

import (
	"sync"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// sharedEvents holds recently encoded watch events, so that an event sent
// to many watchers in the same format is encoded once and its bytes are
// shared, as kube-apiserver's watch cache does with its cachingObject.
// Each Server holds its own (Server.events): no package state.
//
// An encoded event is identified by the stored version it shows (the
// immutable *fsm.KV), its type and resourceVersion, and the encoders
// (media type and group version, through their identifiers). Transformed
// events (Table, PartialObjectMetadata) and bookmarks are not shared.
//
// It is bounded by generations: when the current map reaches
// sharedEventsGen entries it becomes the previous one and the older
// generation is dropped, so at most 2*sharedEventsGen events are held. Every
// watcher of one event encodes it within moments of the others, so the
// window is ample.
type sharedEvents struct {
	mu        sync.Mutex
	cur, prev map[sharedEventKey][]byte
}

type sharedEventKey struct {
	kv       *fsm.KV
	typ      watchcache.EventType
	revision uint64
	encoders string
}

const sharedEventsGen = 4096

func (c *sharedEvents) get(k sharedEventKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.cur[k]; ok {
		return b, true
	}
	b, ok := c.prev[k]
	return b, ok
}

// put records the encoded event; b must not be modified afterwards.
func (c *sharedEvents) put(k sharedEventKey, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || len(c.cur) >= sharedEventsGen {
		c.prev, c.cur = c.cur, make(map[sharedEventKey][]byte, 64)
	}
	c.cur[k] = b
}
