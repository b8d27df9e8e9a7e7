// Package bench is "trustplane bench": it drives a cluster with a fixed
// set of workloads through client-go and reports throughput and latency,
// so that operators can size a cluster and compare it with what they run
// today (kube-apiserver included).
//
// The package owns the workloads (create, get, list, watch fan-out,
// TokenReview, CSR issue, mixed), the runner that spreads clients over the
// given kubeconfigs and times each workload, the result model with its
// JSON form, the table report and the comparison of two results. The
// command wiring (flags, signals, files) lives in cmd/trustplane.
//
// Rules it keeps:
//   - Only standard Kubernetes APIs through client-go, so any conformant
//     server can be measured. Trustplane-only facts (its version, its
//     member count) are read when the server offers them and are optional.
//   - Only the kubeconfigs it is given are targeted. Everything it creates
//     lives in namespaces of its own, or (CSRs, which are cluster-scoped)
//     carries its run label, and is deleted at the end, however the run
//     ended.
//   - Every loop is bounded in count and time and stops by itself: each
//     workload by its duration, each operation by the request timeout,
//     setup and cleanup by their own timeouts.
//   - Errors are counted per workload and reported with samples, never
//     dropped; a workload without a single successful operation fails the
//     run.
//   - The client side should not be the bottleneck more than it must:
//     client-side rate limiting is off by default and every client has its
//     own connection. Client and server may still share a machine; the
//     result records the machine so that readers can tell.
package bench
