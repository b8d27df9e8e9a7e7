package fsm

import (
	"errors"
	"strings"
)

// Sentinel errors returned in Result.Err or by the read methods. The api
// package translates them into Kubernetes Status errors; nothing else does.
var (
	// ErrExists: a put with MustNotExist found a live object at the key.
	ErrExists = errors.New("fsm: key already exists")
	// ErrNotFound: a delete, or a put with a precondition, found no live object.
	ErrNotFound = errors.New("fsm: key not found")
	// ErrModRevisionMismatch: the live object's ModRevision differs from the precondition.
	ErrModRevisionMismatch = errors.New("fsm: mod revision mismatch")
	// ErrUIDMismatch: the live object's UID differs from the precondition.
	ErrUIDMismatch = errors.New("fsm: uid mismatch")
	// ErrCompacted: a read asked for a revision older than the compacted revision.
	ErrCompacted = errors.New("fsm: revision compacted")
	// ErrFutureRevision: a read asked for a revision the store has not applied yet.
	ErrFutureRevision = errors.New("fsm: revision not yet applied")
	// ErrUnknownCommand: a command's version or op is not known to this binary.
	ErrUnknownCommand = errors.New("fsm: unknown command")
)

// Key names one object. Space is the key space it lives in (keyspace.go),
// which the storage layer sets and no request can choose. Group is "" for
// the core group and for internal keys; Namespace is "" for cluster-scoped
// resources.
type Key struct {
	Space     Space
	Group     string
	Resource  string
	Namespace string
	Name      string
}

// Prefix selects the objects of one resource, optionally of one namespace.
// An empty Namespace selects every namespace (and is the only choice for
// cluster-scoped resources).
type Prefix struct {
	Space     Space
	Group     string
	Resource  string
	Namespace string
}

// sep orders keys by namespace, then name: it sorts below every byte that
// can appear in a Kubernetes name, so "ns" sorts before "ns-a".
const sep = "\x00"

// String is the store's ordering key: the group as its space writes it
// (keyspace.go), resource, namespace, name. Keys of different spaces never
// share a prefix.
func (k Key) String() string {
	switch k.Space {
	case SpaceCustom:
		return customGroupPrefix + k.Group + sep + k.Resource + sep + k.Namespace + sep + k.Name
	case SpaceInternal:
		return InternalGroup + sep + k.Resource + sep + k.Namespace + sep + k.Name
	}
	return k.Group + sep + k.Resource + sep + k.Namespace + sep + k.Name
}

// String is the common prefix of every Key under p.
func (p Prefix) String() string {
	s := wireGroup(p.Space, p.Group) + sep + p.Resource + sep
	if p.Namespace != "" {
		s += p.Namespace + sep
	}
	return s
}

// ParseKey reverses Key.String.
func ParseKey(s string) (Key, bool) {
	parts := strings.Split(s, sep)
	if len(parts) != 4 {
		return Key{}, false
	}
	space, group := splitWireGroup(parts[0])
	return Key{Space: space, Group: group, Resource: parts[1], Namespace: parts[2], Name: parts[3]}, true
}

// KV is one stored version of an object. Value is opaque to the fsm (the api
// package stores protobuf-encoded objects without their resourceVersion).
// A KV handed out by the fsm is immutable: callers must not modify it.
type KV struct {
	Key            Key
	Value          []byte
	UID            string
	CreateRevision uint64
	ModRevision    uint64
}

// Op is the kind of a Command.
type Op uint8

const (
	// OpPut creates or replaces the object at Key.
	OpPut Op = 1
	// OpDelete removes the object at Key.
	OpDelete Op = 2
	// OpCompact drops history older than CompactRevision.
	OpCompact Op = 3
	// OpNoop changes nothing; the leader proposes it to move the applied
	// index past the term's first entry before serving linearizable reads.
	OpNoop Op = 4
)

// CommandVersion is the encoding version this binary writes.
const CommandVersion = 1

// Command is one Raft log entry's payload. Everything non-deterministic
// (uids, names, timestamps) is already inside Value when it is proposed.
type Command struct {
	Op    Op
	Key   Key
	Value []byte
	// UID is stored with a put so that later uid preconditions can be checked
	// without decoding Value.
	UID string

	// Preconditions; all that are set must hold, else Result.Err says which failed.
	MustNotExist bool   // put only: no live object may exist at Key
	ModRevision  uint64 // if non-zero, the live object's ModRevision must equal it
	MatchUID     string // if non-empty, the live object's UID must equal it

	CompactRevision uint64 // OpCompact only
}

// Result is what Apply returns for a command, through raft's ApplyFuture.
type Result struct {
	// Revision is the log index that applied the command.
	Revision uint64
	// KV is the stored version after a successful put; nil otherwise.
	KV *KV
	// Prev is the live version before the command (nil if none). When a
	// precondition fails, Prev is the current version, so the caller can
	// explain the failure.
	Prev *KV
	// Err is nil or one of the sentinel errors (ErrExists, ErrNotFound,
	// ErrModRevisionMismatch, ErrUIDMismatch). A failed command changes nothing.
	Err error
}

// EventType says what an applied write did.
type EventType uint8

const (
	// EventPut: an object was created or replaced (Prev == nil means created).
	EventPut EventType = 1
	// EventDelete: an object was removed; KV is the deleted version with
	// ModRevision set to the deleting revision, Prev is the version before.
	EventDelete EventType = 2
)

// Event is one applied change, in log order.
type Event struct {
	Type     EventType
	Revision uint64
	KV       *KV
	Prev     *KV
}

// Listener receives the applied stream. Both methods run on the apply path,
// after the state is visible to readers, and must return quickly and never
// block (queue the work instead), because a slow listener stalls Raft.
type Listener interface {
	// OnApply is called once per applied batch that changed state, with
	// that batch's changes in log order. The events and their KVs are
	// immutable and may be kept: a watch cache holds them as its history.
	OnApply(events []Event)
	// OnIndex is called for every applied index, including configuration
	// entries and no-ops that change nothing, so that listeners can report
	// progress (watch bookmarks) even when their keys are idle.
	OnIndex(index uint64)
}

// RestoreListener is an optional Listener capability, found by type
// assertion. Restore replaces the whole state, so the applied stream jumps
// to index with no events for what lies between: a listener that keeps its
// own copy of history (the watch cache) must drop it and reload from the
// FSM. OnRestore is called on the restore path, before OnIndex(index).
type RestoreListener interface {
	// OnRestore is called after Restore replaced the state with a snapshot
	// at index, before OnIndex(index); history the listener keeps from
	// before is no longer continuous with the stream and must be reloaded.
	OnRestore(index uint64)
}
