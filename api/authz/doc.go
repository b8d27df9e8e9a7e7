// Package authz owns authorisation: kube's RBAC authorizer over an in-memory
// copy of the RBAC objects, the system:masters bypass, the escalation checks
// (the bind and escalate verbs) on RBAC writes, the access reviews
// (SubjectAccessReview and friends) and the bootstrap policy.
//
// Rules it keeps:
//   - Decisions are kube's: the authorizer is k8s.io/kubernetes'
//     plugin/pkg/auth/authorizer/rbac unioned with the privileged group
//     system:masters, exactly as kube-apiserver composes them; escalation
//     checks call kube's pkg/registry/rbac helpers with kube's wording.
//   - Every node authorises from local memory. The Cache is fed only from
//     the fsm's applied stream (subscribe, then load, drop what overlaps;
//     reload on snapshot restore), decodes each RBAC object once when it is
//     applied, and publishes an immutable snapshot through an atomic
//     pointer: requests never take a lock and never decode.
//   - The Cache decodes a stored value with the RBAC stores' own codec and
//     nothing else (registry.StorageCodec: protobuf, opened first with the
//     resource's encryption at rest), and only into the kind its key's
//     resource holds, then converts it to v1 as a read would. A value in
//     any other encoding (JSON, YAML) or of another kind was not written by
//     an RBAC store: it is left out (it grants nothing) and reported by its
//     key, never with its bytes or the decoder's message about them.
//   - A node's RBAC view may trail the leader by what it has not applied
//     yet, as kube-apiserver's informer-fed authorizer trails etcd.
//   - The bootstrap policy is kube's, reconciled as kube-apiserver does it
//     (missing objects created, missing rules and subjects added to objects
//     annotated autoupdate=true, nothing removed), written through the
//     registry stores by the leader as a system:masters internal user.
package authz
