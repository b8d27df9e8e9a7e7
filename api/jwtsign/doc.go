// Package jwtsign owns the signing endpoint behind kube's
// ExternalJWTSigner: another API server's sidecar (trustplane
// external-signer) posts the claims segment of a token that API server
// built, and gets back the header and signature made with this cluster's
// active token signing key. The private key stays in the cluster; only
// signatures leave it.
//
// Rules it keeps:
//   - RBAC decides, per request, which issuer and which audiences the
//     caller may sign for: the verb "sign" on the resources "issuers" and
//     "audiences" of the group externaljwt.trustplane.io, named by the
//     claim's value (as kube's CSR signers are authorised with "sign" on
//     "signers"), besides "post" on the path itself. Every audience of the
//     token must be allowed.
//   - This cluster's own issuers (--service-account-issuer and kube's
//     legacy issuer) are never signed, whatever RBAC says, nor any spelling
//     a relying party might take for them (case, spaces, trailing
//     slashes): a token of its own issuer signed with its own key would
//     authenticate here, and at every relying party of this cluster, as
//     whoever its claims name. TokenRequest alone issues those.
//   - Claims are read by their exact names, and claims with two keys in
//     one object that are equal under Unicode case folding ("iss" twice,
//     "iss" and "ISS" or "iſs") are refused: JWT libraries disagree on
//     which counts (Go's match names regardless of case and keep the last),
//     so the rules could check one issuer, audience or expiry while a
//     relying party reads another.
//   - A token must be issued about now (iat within a few minutes) and
//     expire within MaxLifetime, every bound checked before a difference
//     is taken; the claims are bounded in size and depth, read strictly
//     enough for iss, aud, iat, nbf and exp, and otherwise signed as sent,
//     byte for byte.
//   - Nothing is written: the endpoint answers on the node it reaches,
//     from the keys that node has applied. Neither the claims nor the
//     signature are logged or audited (the audit log records no body of a
//     non-resource request).
package jwtsign
