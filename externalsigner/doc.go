// Package externalsigner is the sidecar that makes trustplane the token
// signer of other kube-apiservers: it serves kube's ExternalJWTSigner
// gRPC API (k8s.io/externaljwt, v1alpha1: Sign, FetchKeys, Metadata) on a
// unix socket, for a kube-apiserver started with
// --service-account-signing-endpoint, and does each call through the
// trustplane API with its own identity.
//
// Rules it keeps:
//   - Nothing is signed here: Sign posts the claims to trustplane's
//     signing endpoint (api/jwtsign), which signs with the cluster's
//     active key, and RBAC there decides which issuer and audiences this
//     sidecar's identity may sign for. The sidecar holds no key.
//   - Sign fails fast: one request, bounded by Config.Timeout, and an
//     unreachable or refusing trustplane is a gRPC error naming the cause
//     (Unavailable, PermissionDenied, InvalidArgument), never a fallback.
//   - FetchKeys is trustplane's key set as its discovery document
//     publishes it (/openid/v1/jwks): every key that verifies, pending
//     ones included, so that a key rotation in trustplane is one in every
//     API server behind it. When trustplane cannot be reached FetchKeys
//     fails, and kube-apiserver keeps the keys it has: tokens already
//     issued keep verifying.
//   - The socket file is mode 0600, in a directory the operator chose
//     (which should be as private): only the API server beside it, run as
//     the same user, may call it.
package externalsigner
