// Package registry owns the generic store: the one place where create,
// update, delete and read run, in a fixed order, for every served
// resource. It reads and writes only through its storage layer
// (api/storage), which owns the fsm, the resourceVersion rules, the codec,
// encryption at rest and the decoded-object cache.
//
// Rules it keeps:
//   - Objects are handled in their internal (hub) version; how they are
//     stored, and that their resourceVersion is always the fsm ModRevision
//     of the stored value, is the storage layer's rule.
//   - Per-resource behaviour comes only from the Resource's strategies
//     (kube's own strategies where kube has them), run through
//     rest.BeforeCreate / rest.BeforeUpdate / rest.BeforeDelete so that
//     order and messages match kube-apiserver.
//   - Every write is one storage call with preconditions; read-modify-write
//     is the storage layer's GuaranteedUpdate, whose update function runs
//     admission and the strategy and may run more than once.
//   - Deletion keeps kube's order: a pending deletion answers as done, an
//     object with finalizers (or a graceful deletion) is only marked, the
//     update that removes the last finalizer of a marked object deletes it,
//     and the options' propagation policy sets the garbage collector's
//     finalizers. Marking is never refused for size: an object that is
//     stored must stay deletable.
//   - A stored encoding larger than Config.MaxObjectBytes is refused by the
//     storage layer with 413 before it is proposed; as in kube, a write
//     other than server-side apply first drops managedFields to fit.
//   - The registry never parses a resourceVersion, never builds a continue
//     token and never reads the fsm: the storage layer does, with kube's
//     Status errors, which the HTTP layer only writes out.
//   - Admission is a chain each store is built with (admission.go): the
//     resource's own Admit, then the node's plugins for it (Admission,
//     handed to New), fixed before the first request; it runs before the
//     strategy, on the leader, inside the update loop; subresources
//     (status, approval) update
//     through their own strategy. Virtual resources (reviews, TokenRequest)
//     are registered here for discovery but never stored.
//   - A Resource may serve the objects another stores (StoredAs): kube's
//     events.k8s.io/v1 events are core v1 Events, converted by kube's
//     conversions on the way in and out, validated by kube's strategy
//     according to the request's group version, counted once. Their TTL
//     (Resource.TTL, --event-ttl) is the storage layer's Expiry.
//   - Encryption happens in exactly one place, the storage layer's AtRest
//     (api/storage/atrest.go); Registry.AtRest and Registry.Open hand it to
//     the readers of stored values outside the registry (the RBAC cache,
//     the signing keys).
package registry
