package watchcache

import (
	"errors"
	"fmt"

	"github.com/trustplane/trustplane/fsm"
)

// Sentinel errors. The api translates them into Kubernetes Status errors
// (or watch ERROR events); nothing else does.
var (
	// ErrTooOld: the requested resourceVersion is older than the window, or
	// older than the fsm's compacted revision when an initial state was
	// asked for. The api answers 410 Gone, "too old resource version", and
	// the client relists. It always arrives wrapped in a *TooOldError.
	ErrTooOld = errors.New("watchcache: too old resource version")
	// ErrSlowWatcher: the watcher fell too far behind the applied stream
	// (its client stopped reading, or the window moved past it). The api
	// ends the HTTP watch; the client resumes from the last resourceVersion
	// it received, which may then be ErrTooOld.
	ErrSlowWatcher = errors.New("watchcache: watcher too slow, resume from the last resourceVersion received")
	// ErrClosed: the cache was closed (the node is shutting down).
	ErrClosed = errors.New("watchcache: closed")
)

// TooOldError is ErrTooOld with the numbers a client needs. Its message is
// kube-apiserver's wording, so the api can put it on the wire as is.
type TooOldError struct {
	// Requested is the resourceVersion the watch asked to start after.
	Requested uint64
	// Oldest is the oldest resourceVersion a watch can start from now.
	Oldest uint64
}

// Error is kube-apiserver's message for a watch that is too old.
func (e *TooOldError) Error() string {
	return fmt.Sprintf("too old resource version: %d (%d)", e.Requested, e.Oldest)
}

// Unwrap makes errors.Is(err, ErrTooOld) hold.
func (e *TooOldError) Unwrap() error { return ErrTooOld }

// EventType is what a watch event tells the client. The values are the
// Kubernetes wire names, so the api converts with a plain type conversion.
type EventType string

// Event types. Errors are not events here: a watcher that fails ends, and
// Watcher.Err says why; the api turns that into an ERROR event.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
)

// Event is one watch event as one watcher sees it. Its Type depends on the
// watcher's predicate (an update that moves an object out of a selector is
// DELETED for that watcher), but the decoded objects behind it are shared
// by every watcher of the same change, so an Event is cheap to fan out.
type Event struct {
	Type EventType
	// Revision is the resourceVersion the event must carry on the wire:
	// the applied index of the change, the object's ModRevision for an
	// initial ADDED, the revision reached for a BOOKMARK. It is not always
	// KV.ModRevision (a DELETED for an object leaving the selector shows
	// the previous version at the change's revision), so the api sets
	// resourceVersion from Revision, always.
	Revision uint64
	// KV is the stored version the event shows (Object decodes it): the
	// new version for ADDED and MODIFIED, the deleted version for a delete,
	// the previous version for an object leaving the selector. nil for a
	// BOOKMARK.
	KV *fsm.KV
	// Prev is the version before the change (nil for a create, an initial
	// ADDED or a BOOKMARK).
	Prev *fsm.KV
	// InitialEventsEnd marks the BOOKMARK that follows the initial ADDED
	// events (sendInitialEvents); the api annotates it with
	// k8s.io/initial-events-end: "true".
	InitialEventsEnd bool

	c *Cache
}

// Object returns KV decoded by Config.Decode. The cache holds no decoded
// objects: every call asks Config.Decode, whose result (the storage layer's
// one decoded object per stored version) is shared, so the caller must copy
// it before changing anything (resourceVersion included). A BOOKMARK has no
// object: (nil, nil).
func (e Event) Object() (any, error) {
	return e.decode(e.KV)
}

// PrevObject returns Prev decoded, shared like Object; (nil, nil) if there
// is no Prev.
func (e Event) PrevObject() (any, error) {
	return e.decode(e.Prev)
}

func (e Event) decode(kv *fsm.KV) (any, error) {
	if kv == nil || e.c == nil {
		return nil, nil
	}
	return e.c.cfg.Decode(kv)
}

// eventOverhead approximates what an event costs besides its stored
// encodings: the item, the KVs and their keys.
const eventOverhead = 256

// eventBytes is what an event counts against Config.MaxBytes: the encodings
// it keeps alive and eventOverhead.
func eventBytes(e *fsm.Event) int64 {
	n := int64(eventOverhead)
	if e.KV != nil {
		n += int64(len(e.KV.Value))
	}
	if e.Prev != nil {
		n += int64(len(e.Prev.Value))
	}
	return n
}

// item is one applied change in the window (or one initial object). It
// holds the stored versions only; decoded objects live in whatever cache
// Config.Decode reads (the storage layer's), never here, so the window
// costs its encodings and nothing more however many watchers read it.
type item struct {
	ev fsm.Event
	at int64 // Clock UnixNano when appended; 0 for initial objects
}

func identity(kv *fsm.KV) (any, error) { return kv, nil }
