// Package certs owns trustplane's X.509 material on disk: the cluster CA,
// the node CA, the certificates they issue to nodes and admin clients, and
// the kubeconfig files that carry them to kubectl and client-go.
//
// Rules this package keeps:
//
//   - Node identity has its own CA (node-ca.crt), used for nothing but node
//     certificates, as kube's front-proxy CA is separate from its client
//     CA. NodeVerifier is the one function that decides "is this a node,
//     and which": a chain ending at the node CA, the node organisation and
//     the node name prefix. A subject alone, from any other CA, is nothing.
//   - A private key never appears in an error, a log line or a returned
//     string. Errors name files and say what was wrong, never what was in
//     them.
//   - A CA that is half present on disk (a certificate without its key, or
//     the reverse) is an error for the operator to resolve. It is never
//     silently regenerated, because a new CA would orphan every certificate
//     the old one issued and split a cluster whose nodes share the CA.
//   - Key files are written with mode 0600 and every file is written
//     atomically (temporary file, fsync, rename), so a crash leaves either the
//     old file or the new one, never a torn one.
//   - EnsurePair is idempotent: a pair on disk that is still good for the
//     request is reused, so restarts do not churn certificates.
//
// All keys are ECDSA P-256.
//
// This package imports nothing else from trustplane.
package certs
