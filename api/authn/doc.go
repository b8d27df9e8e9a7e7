// Package authn owns who a bearer token belongs to: the ServiceAccount
// token signing keys (kept in the replicated fsm), the token authenticator
// (static token file, bound and legacy ServiceAccount JWTs, behind kube's
// token cache), the token APIs (TokenRequest, TokenReview,
// SelfSubjectReview) and the OIDC discovery documents.
//
// Rules it keeps:
//   - kube does the work: token claims, signing, validation, the review
//     REST objects and the discovery documents are kube's own code
//     (k8s.io/kubernetes/pkg/serviceaccount and pkg/registry/...); this
//     package only supplies them with keys and objects.
//   - Signing keys live in the fsm's internal key space (fsm.SpaceInternal),
//     which no store of the API can reach, whatever a custom resource
//     definition names. They are written only by the leader, through
//     Raft, with MustNotExist, so two leaders cannot both create a key; every
//     node reads them from its own applied state, so every node verifies.
//   - Every key is pending, active or retiring (phases.go, the rotation
//     model of api/rotation): all three verify, only the active one signs.
//     The phases are one record in the internal key space, changed by one
//     compare-and-swap per step (start, promote, finish, abort), so no node
//     ever sees two keys sign, or none. Before the first step the newest
//     key is active and older ones retiring, as earlier builds had it.
//     Finish replaces a retiring key with a tombstone (through Raft, so on
//     every node): tokens it signed stop verifying. Keys are never
//     deleted, so generations are never reused and FirstKey always exists.
//   - Stored keys are encrypted at rest with the registry's transformer
//     for secrets (storage.AtRest), on the leader before proposing; every
//     new leader re-encrypts keys stored with a key that is no longer
//     first (Reencrypt).
//   - A stored key is decoded exactly as the key store writes it (strict
//     JSON of storedKey: its field names, nothing unknown or repeated), so
//     another object written under a key's name is not a key; errors about
//     a stored key name its generation, never what it holds.
//   - Private keys never leave the key store: no error, log line or API
//     answer carries one, and the JWKS holds public keys only.
//   - Objects a token is bound to (ServiceAccount, Pod, Secret) are read
//     from local applied state, like kube's informer-backed getter; the
//     token cache keeps a positive answer for CacheTTL at most.
//   - This cluster's tokens are answered for only from state within the
//     staleness bound (SetFresh): outside it, after a catch-up; a node
//     that cannot catch up says ErrNotFresh (the API's 503), never "not
//     authenticated" (freshTokens, reviewFresh), and never verifies with
//     keys the cluster may have retired since.
package authn
