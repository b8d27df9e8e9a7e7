// Package workload drives a chaos run's clients against every node with
// client-go, unchanged, and records what each request was answered.
//
// It owns three kinds of client:
//   - writers and readers of a small set of ConfigMap keys (create, update
//     and delete with resourceVersion preconditions, linearizable and
//     resourceVersion=0 gets and lists), spread over all nodes;
//   - a CSR client that creates CertificateSigningRequests and approves
//     them, so the checkers can see each one signed exactly once;
//   - one watcher per node and resource that resumes from the last
//     resourceVersion it delivered after every disconnect, and is cut on
//     purpose now and then to prove resumption.
//
// Rules it keeps:
//   - Every value written is unique in the run, so the log names its write.
//   - An answer is classified by what it proves (outcome): success, a
//     definite failure, or unknown. Only an answer that says the request
//     was not processed is a failure; a timeout or a cut connection after
//     the request left is unknown.
//   - Objects carry the run's label, and lists and watches select on it,
//     so a run attached to a cluster in use sees only its own objects.
//   - Every loop stops with the context; requests are bounded by a timeout.
package workload
