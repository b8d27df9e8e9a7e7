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
//   - Encryption happens in exactly one place: AtRest (atrest.go), kube's
//     value transformers from an EncryptionConfiguration, per resource,
//     with the fsm key as authenticated data. Values are encrypted on the
//     leader before they are proposed, so the fsm stores, replicates and
//     snapshots only ciphertext and stays deterministic; they are
//     decrypted wherever a stored value is decoded (get, list, the watch
//     cache's Decode, the RBAC cache and the signing keys through Open and
//     AtRest). Nothing else reads or writes KV.Value of a stored resource.
//   - An update that changes nothing writes nothing, unless the stored
//     value is stale (not written with the first configured key): then it
//     is written again, as kube's GuaranteedUpdate does, which is how a
//     rewrite of every Secret rotates encryption keys.
package registry
