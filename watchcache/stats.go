package watchcache

// Stats is one reading of a cache's figures, for metrics. The counters
// start at zero when the cache is built.
type Stats struct {
	// Events and Bytes are what the window holds now (bounded by
	// MaxEvents, MaxBytes and Window).
	Events int
	Bytes  int64
	// Oldest and Progress are the window's bounds (Range): it holds every
	// change in (Oldest, Progress].
	Oldest, Progress uint64
	// Appended counts the events appended from the applied stream (the
	// history loaded at start and on a restore not included): its rate
	// is the events per second the node applies.
	Appended uint64
	// Watchers is the number of watchers registered now.
	Watchers int
	// SlowWatchers counts the watchers cut off with ErrSlowWatcher.
	SlowWatchers uint64
}

// Stats reads the cache's figures. It holds the read lock only to count,
// so it never delays the apply path by more than that.
func (c *Cache) Stats() Stats {
	c.mu.RLock()
	st := Stats{
		Events: len(c.items) - c.head, Bytes: c.bytes,
		Oldest: c.start, Progress: c.progress,
	}
	for _, ws := range c.groups {
		st.Watchers += len(ws)
	}
	c.mu.RUnlock()
	st.Appended = c.appended.Load()
	st.SlowWatchers = c.slow.Load()
	return st
}
