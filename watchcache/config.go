package watchcache

import (
	"errors"
	"fmt"
	"time"

	"github.com/trustplane/trustplane/fsm"
	"k8s.io/utils/clock"
)

// Config is everything a Cache needs besides the fsm. cmd/ fills it from
// flags (the window length is the operator's knob); the storage layer,
// which builds the cache (api/storage New), sets Decode.
type Config struct {
	// Window is how long an applied event stays watchable, measured from
	// when this node appended it. A watch from a resourceVersion whose
	// successor has left the window gets 410 Gone and must relist.
	Window time.Duration
	// MaxEvents caps the events held whatever their age, so a write burst
	// cannot grow the window without bound. The oldest go first.
	MaxEvents int
	// MaxBytes caps the bytes the window holds whatever its age: the
	// stored encodings each event keeps alive (the new and the previous
	// version) plus a fixed overhead per event (eventOverhead). Large
	// objects written in a burst cannot grow a node's memory past it. The
	// oldest go first. The window holds no decoded objects (Decode).
	MaxBytes int64
	// BookmarkInterval is how often a watcher that asked for bookmarks gets
	// one at the node's applied index, writes or not (idle progress).
	BookmarkInterval time.Duration
	// WatcherBuffer is how many events may be applied while a watcher's
	// client is not reading (its Events channel full) before the watcher is
	// cut off with ErrSlowWatcher. The window itself is the buffer, so this
	// costs no memory per watcher, and a client that reads steadily while
	// a long backlog is replayed to it is not cut off.
	WatcherBuffer int
	// Clock drives the window's age, bookmarks and their timers; tests
	// inject k8s.io/utils/clock/testing.FakeClock so they never sleep.
	Clock clock.Clock
	// Decode turns a stored value into the object that predicates and the
	// api see. The cache keeps no decoded object: it calls Decode whenever a
	// watcher needs one (each watcher with a predicate, for the new and the
	// previous version; the api for the event it writes), so Decode must be
	// cheap when asked again for the same version. The storage layer's
	// DecodeShared is: one decoded object per stored version while its
	// bounded cache holds it, held once per node, which the watch window
	// therefore never duplicates; a version evicted from that cache is
	// decoded again when asked, as a new object. The result
	// is shared and must not be modified. nil means the object is the
	// *fsm.KV itself.
	Decode func(kv *fsm.KV) (any, error)
}

// DefaultConfig returns the production settings: a five-minute window of at
// most a million events and 512 MiB, bookmarks every minute, and watchers
// cut off when 1024 events are applied while their client is not reading.
func DefaultConfig() *Config {
	return &Config{
		Window:           5 * time.Minute,
		MaxEvents:        1_000_000,
		MaxBytes:         512 << 20,
		BookmarkInterval: time.Minute,
		WatcherBuffer:    1024,
		Clock:            clock.RealClock{},
	}
}

// Validate reports the first setting New cannot work with, so that a bad
// flag fails at start rather than as an odd watch later.
func (c *Config) Validate() error {
	var errs []error
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("window %v must be positive", c.Window))
	}
	if c.MaxEvents <= 0 {
		errs = append(errs, fmt.Errorf("max events %d must be positive", c.MaxEvents))
	}
	if c.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("max bytes %d must be positive", c.MaxBytes))
	}
	if c.BookmarkInterval <= 0 {
		errs = append(errs, fmt.Errorf("bookmark interval %v must be positive", c.BookmarkInterval))
	}
	if c.WatcherBuffer <= 0 {
		errs = append(errs, fmt.Errorf("watcher buffer %d must be positive", c.WatcherBuffer))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("clock must be set"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("watchcache: invalid config: %w", err)
	}
	return nil
}
