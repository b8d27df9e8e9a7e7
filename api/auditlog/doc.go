// Package auditlog owns the audit log: kube-apiserver's --audit-log-path
// and --audit-policy-file, built from kube's own machinery (the
// audit.k8s.io/v1 Policy and its rule evaluator, the log backend writing
// one Event JSON line per stage, rotated by lumberjack as kube-apiserver's
// options rotate it) and the one rule trustplane adds to any policy:
// credentials never reach the log (Capped, Redacting).
//
// The filters that record the events (kube's WithAuditInit, WithAudit and
// WithFailedAuthenticationAudit) are wired in package api, which also
// decides which node records a request: the one its client talks to.
//
// Rules it keeps:
//   - Without a log path, or without a policy (kube logs nothing without
//     one), Open returns a Log with a nil Sink, and the API adds nothing to
//     the request path.
//   - Requests that carry a credential (Secrets, TokenRequest, TokenReview:
//     CarriesCredentials) are recorded at the Metadata level at most,
//     whatever the policy says: no request or response body, so no secret
//     data, token or key, is ever written. One function decides it, and
//     the API applies it to every evaluator it is given.
//   - Nothing else in such a request's event quotes its objects either
//     (Redacting, applied to every sink the API is given): admission
//     policies' annotations, validation_failure messages, response status
//     messages and causes are left out; the client still gets the message.
//   - Writing is blocking and errors are ignored, as kube-apiserver's
//     default "blocking" mode: a full disk does not fail requests.
package auditlog
