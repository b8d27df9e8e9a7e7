package registry

import "github.com/trustplane/trustplane/api/storage"

// Storage returns the node's storage layer that every store shares, for
// the figures the api reports about it (stored objects, the watch cache).
func (r *Registry) Storage() *storage.Storage { return r.storage }
