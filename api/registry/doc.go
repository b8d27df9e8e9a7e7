// Package registry owns the generic store: the one place where create,
// update, delete and read run against the Raft-backed fsm, in a fixed order,
// for every served resource.
//
// Rules it keeps:
//   - Objects are handled in their internal (hub) version and stored as
//     protobuf of their external version, without a resourceVersion; the
//     resourceVersion is always the fsm ModRevision of the stored value.
//   - Per-resource behaviour comes only from the Resource's strategies
//     (kube's own strategies where kube has them), run through
//     rest.BeforeCreate / rest.BeforeUpdate so that order and messages
//     match kube-apiserver.
//   - Every write is one fsm command with preconditions; read-modify-write is
//     an optimistic loop on ModRevision.
//   - A stored encoding larger than Config.MaxObjectBytes is refused with
//     413 before it is proposed, so it never reaches the Raft log; as in
//     kube, a write other than server-side apply first drops managedFields
//     to fit. Only marking an object for deletion is exempt: it must stay
//     deletable.
//   - fsm sentinel errors become Kubernetes Status errors here; the HTTP layer
//     only writes them out.
//   - A Resource's Admit hook (admission) runs before its strategy, on the
//     leader, inside the update loop; subresources (status, approval) update
//     through their own strategy. Virtual resources (reviews, TokenRequest)
//     are registered here for discovery but never stored.
package registry
