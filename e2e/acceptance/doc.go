// Package acceptance is issue 17's acceptance test subject: a small
// controller of the kind users run beside trustplane, built only from
// client-go's parts (leader election on a Lease, a dynamic informer, a
// rate-limited workqueue, an events recorder), with no knowledge of
// trustplane.
//
// It serves IdentityRequests (acceptance.example.com/v1, a custom
// resource): for each, it makes the ServiceAccount the request names,
// owned by the request, issues a token for it through TokenRequest,
// checks the token with a TokenReview, and writes the outcome to the
// request's status, recording an event. The rules it keeps: only the
// Lease holder reconciles; a reconcile is idempotent (an issued request
// whose generation was observed is left alone), so a new holder may
// redo what the old one did; errors are retried with backoff.
package acceptance
