// Package storage is the storage layer under the generic registry: the one
// place that turns Kubernetes reads and writes on keys into fsm reads and
// Raft proposals. It is shaped like kube's k8s.io/apiserver/pkg/storage
// (Get, Create, GuaranteedUpdate, Delete, GetList and Watch,
// with preconditions, a codec and a predicate handed in), but on fsm.Key
// rather than etcd key strings, and it hands out shared, immutable decoded
// objects where kube decodes into a caller's object (see "Why not kube's
// storage.Interface" below).
//
// It owns, and nothing above it repeats:
//
//   - resourceVersion parsing, with kube-apiserver's Status messages: "" and
//     "0" are 0; anything that is not a positive decimal uint64 is 400
//     (ParseResourceVersion for reads, the watch's own wording for watches).
//   - Freshness (the consistency contract of DESIGN.md §5): a read at ""
//     waits for a read index confirmed by the leader (503 with Retry-After
//     when there is none); at "0" it is served locally at once; at N it
//     waits until this node has applied N, bounded by Config.FreshWait,
//     then answers kube's 504 "Too large resource version" with
//     Retry-After 1.
//   - Applied: the node's applied index, read from the Backend, never
//     through a dummy read.
//   - Continue tokens: their encoding, their validation (400 with kube's
//     messages for a hostile or foreign token, or for a resourceVersion
//     given with one), and the revision and key a list resumes from.
//   - Compaction: a read at a compacted revision is 410 Gone, with kube's
//     "inconsistent continue" token when a continued list's revision was
//     compacted; a watch from before the window is 410 as an ERROR event.
//   - Watches: the node's watch cache, which it builds over the fsm's
//     applied stream (Config.Feed) and alone reads; the start position of
//     a watch (after which revision, and whether the state at it comes
//     first); the watch cache decodes through the stores' shared object
//     cache, so a stored version that is both read and watched is decoded
//     once and held once while that cache holds it.
//   - Reads and writes on keys (Store: Get, Create, GuaranteedUpdate,
//     Delete, GetList): the stored encoding (a codec handed in: protobuf of
//     the external version, without resourceVersion), preconditions with
//     kube's 409 messages, the optimistic loop on ModRevision, the size
//     bound (413 before anything reaches the Raft log), and the mapping of
//     fsm results and Propose errors to Status (503 with Retry-After when
//     the write certainly did not happen, 504 without when it may have).
//   - Encryption at rest (AtRest: kube's value transformers per resource,
//     the fsm key as authenticated data), sealed on the leader before a
//     value is proposed and opened wherever a stored value is decoded, so
//     the fsm stores, replicates and snapshots only ciphertext and stays
//     deterministic. Nothing else reads or writes KV.Value of a stored
//     resource; the RBAC cache and the signing keys go through Open and
//     AtRest. AtRestOf is the one rule that maps a stored value to its
//     transformation (its resource's; an internal record's is that of
//     Secrets, InternalAtRest); the transformers themselves may change
//     under a store (api/encryptionkeys rotates data keys), so a store
//     keeps its transformer, never a key.
//   - The decoded-object cache (objcache.go): one decoded object per
//     stored version while it is cached, shared and never modified (by
//     lists, and by the watch cache, which holds none of its own), and its
//     encodings as a list item, JSON and protobuf. The node bounds it: the
//     decoded objects of every resource within maxCachedObjectBytes (as
//     objectCost estimates them; past it, entries not read since the last
//     eviction go first), the encodings within maxItemEncodingBytes. A
//     version evicted is decoded again when it is next read, as a new
//     shared object: a caller may hold the same version as two objects,
//     never one object for two versions.
//   - Shared storage: a resource may keep its objects under another's keys
//     (ResourceConfig.Stored), as kube serves events.k8s.io/v1 events from
//     core v1 Event's storage: one object, one uid and resourceVersion,
//     two group versions. The first store of a stored resource decodes its
//     values for the watch cache, counts them (apiserver_storage_objects)
//     and sets their TTL; every store lists and errs in its own GVR.
//   - Expiry (ttl.go): kube's etcd leases, for resources with a TTL
//     (events, --event-ttl). See the rule below.
//
// Rules it keeps:
//
//   - Key spaces (fsm.Space). The storage layer alone chooses the space of
//     a key: a built-in store's keys are in fsm.SpaceBuiltin, a custom
//     resource's in fsm.SpaceCustom (ResourceConfig.Custom), and no store
//     reaches fsm.SpaceInternal. Stores build their keys (Store.Key,
//     Store.Prefix) and refuse any other (a 500 naming ErrKeySpace), so no
//     group, plural or name a request or a definition carries can make a
//     store read or write another resource's keys or another space. A
//     built-in store must be a resource of Config.Builtin, the list the
//     fsm classifies the log with, or ForResource refuses it.
//
//   - Stored values are decoded with their own store's codec only, and an
//     error about one names the object and never quotes its bytes
//     (ErrUndecodable), in a Status, a log or the audit log.
//
//   - An object with a TTL is deleted TTL after its last write, never
//     before, by the leader, through the log: Expiry runs one term per
//     leadership, keeps each object's deadline in memory from the applied
//     stream (one listing when the term starts, then a heap push per
//     write: no periodic scan), and proposes an ordinary delete guarded by
//     the ModRevision of the version that expired, so a newer write is
//     never lost and the fsm stays free of clocks. Deadlines are not
//     replicated: a new term (a new leader, a restart) gives every object a
//     full TTL from its own start, as etcd refreshes its leases when its
//     leader changes, so an object lives at most twice its TTL. The delete
//     ignores finalizers, as a lease does.
//
//   - Every error it returns is a Kubernetes Status error (apierrors), ready
//     for the HTTP layer to write, but one: a create that carries a
//     resourceVersion gets kube's plain ErrResourceVersionSetOnCreate, which
//     kube-apiserver answers as a 500 without a reason. fsm sentinels, and
//     the watch cache's TooOldError (WatchTooOld), are translated here and
//     nowhere above.
//
//   - No copies on the hot paths: a list decodes each stored version at
//     most once and hands out the shared object; only Get, Decode and the
//     update loop copy, because their callers modify what they get.
//
//   - Every write is one fsm command with preconditions; an update that
//     changes nothing writes nothing, unless the stored value is stale (not
//     written with the first configured key): then it is written again, as
//     kube's GuaranteedUpdate does, which is how a rewrite of every Secret
//     rotates encryption keys.
//
//   - Reads are local to the node once freshness holds: the Backend's Get
//     and List never wait.
//
// Why not kube's storage.Interface. Implementing it would let kube's
// generic registry (genericregistry.Store) run on this layer, but it
// would cost the hot paths what the house has won: its keys are strings
// (every call would parse a key back into an fsm.Key), Get and GetList
// decode into an object the caller owns (a copy of every object on every
// list, where the registry shares one decoded object per stored version
// and splices cached JSON for list items), and Watch returns
// watch.Interface events holding objects (losing the stored version that
// lets every watcher share one encoding). The registry above keeps kube's
// strategy order itself (rest.BeforeCreate, BeforeUpdate, BeforeDelete),
// so kube's generic registry would add a second copy of that order rather
// than replace one. The method set and semantics follow kube's so that an
// adapter could be written on top if that ever pays.
package storage
