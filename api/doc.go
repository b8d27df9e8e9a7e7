// Package api owns the HTTP face of trustplane: TLS serving, the filter chain
// (panic recovery, authentication, warnings), content negotiation, the
// generic REST handlers, discovery, the OpenAPI v3 documents, version and
// health endpoints.
//
// Rules it keeps:
//   - Handlers only parse, negotiate and write; every Kubernetes rule about
//     objects lives in a resource's strategy, run by the generic store in
//     api/registry.
//   - Every error reaches the client as a metav1.Status shaped like
//     kube-apiserver's, written in exactly one place (writeError).
//   - Nothing a client sends may take the node down: handler panics become
//     500 Status responses and are logged with a stack.
//   - Request bodies are bounded (3 MiB, as kube-apiserver).
package api
