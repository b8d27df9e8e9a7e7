// Package api owns the HTTP face of trustplane: TLS serving, the filter chain
// (panic recovery, audit, authentication, impersonation, authorisation,
// leader forwarding, warnings), content negotiation, the generic REST handlers
// (resources, their subresources, and virtual resources such as reviews),
// discovery, the OpenAPI v3 documents, version, health and metrics
// endpoints.
// Authentication, authorisation and admission decisions are made by the
// api/authn, api/authz and api/admission packages plugged in through Config
// and the registry.
//
// Rules it keeps:
//   - Handlers only parse, negotiate and write; every Kubernetes rule about
//     objects lives in a resource's strategy, run by the generic store in
//     api/registry.
//   - Every error reaches the client as a metav1.Status shaped like
//     kube-apiserver's, written in exactly one place (writeError).
//   - Nothing a client sends may take the node down: handler panics become
//     500 Status responses and are logged with a stack. Nothing a client
//     sends may change state on an error: every body, patch and query
//     decoder is fuzzed through the handlers against the real stores
//     (fuzz_test.go), which fails on a panic or on an error answer after
//     which any stored object differs.
//   - Requests are bounded in size, count and time (limits.go): bodies
//     (3 MiB), requests in flight (429, kube's maxinflight filter, run
//     before bearer tokens are checked and before authorisation, so 401s
//     and 403s wait for its slots too; watches and health probes exempt),
//     watches per node and per caller with a reserve for system identities
//     (429), the request deadline, which is also the body read deadline
//     (504, kube's timeout filter), and connections in their TLS handshake
//     (closed at accept).
//   - Authorisation sees the effective user: impersonation runs first, and
//     a follower forwards a write with that user in X-Remote-* headers,
//     which only peer node certificates may set. Config.Nodes decides who
//     is a node (certs.NodeVerifier: the node CA only); the forwarder
//     hands a write only to an API that presents a node certificate.
//   - A node outside the staleness bound (Config.MaxStaleRead,
//     LocalStateFresh) decides who a caller is and what it may do only
//     after catching up (caughtup.go): its client CAs, keys and RBAC may be
//     older than the cluster's. Only its health, version, metrics,
//     profiles and Raft and membership status are answered from its own
//     state first.
//   - Only the health and version paths are served without credentials.
//     The operator endpoints under /debug/trustplane (members, raft status,
//     snapshot) and /debug/pprof are for system:masters alone. The snapshot
//     (snapshot.go) is served by the node asked, from its own state after a
//     read index, in package fsm/backup's file format, never forwarded.
//   - Metrics (metrics.go) are kube's where kube has them, recorded as kube
//     records them: a request once, on the node its client talks to (never
//     again on the leader a follower forwards it to), and only for routes
//     served, so a client cannot add series. /metrics reports this node
//     alone, is never forwarded, and RBAC decides who reads it
//     (system:monitoring, cluster-admin). Nothing recorded per request
//     allocates beyond kube's MonitorRequest: the code and size come from
//     the one response wrapper withRecovery already makes.
//   - The audit log (audit.go) is kube's filters in kube's order, and, like
//     metrics, records a request once, on the node its client talks to,
//     with the client's identity. Requests that carry a credential
//     (Secrets, TokenRequest, TokenReview) are recorded at Metadata at
//     most whatever the policy says (api/auditlog.Capped), so no body
//     with secret data, a token or a key is written. With no audit log
//     configured no filter is installed.
//   - A forwarded write leaves from the listen IP when that is a specific
//     IP of the leader's class; otherwise the kernel chooses (dialsrc's
//     rule), so a node bound to every interface is unchanged.
package api
