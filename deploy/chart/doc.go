// Package chart holds the tests of the Helm chart in trustplane/ (the chart
// itself is YAML and templates; this package has no code of its own).
//
// The tests run the real tools: helm is pinned as a tool of this module
// (go.mod's tool line) and built once per test run, the trustplane binary
// is built from the repository's root module, and kubectl comes from PATH.
//
// Rules the tests keep:
//
//   - Rendered manifests are decoded strictly into k8s.io/api types (an
//     unknown field is a failure) and checked with kube-apiserver's own
//     validation from k8s.io/kubernetes, after kube's defaulting and
//     conversion to the internal types, so what passes here is what an API
//     server would accept. Where the API server fills fields before it
//     validates (a Service's cluster IP and IP families, a Job's generated
//     selector), the tests fill them the same way, and say so.
//   - The chart's own rules are checked on the rendered objects, never on
//     the template text: replicas, bootstrap-expect and the seeds agree;
//     probes use the health paths; the security context is locked down; no
//     key material is in any manifest; every environment variable is a
//     serve flag's TRUSTPLANE_* twin, as `trustplane serve -h` lists them;
//     the NetworkPolicy (on by default) opens the Raft and gossip ports to
//     the trustplane pods alone; the certs-init hook's pod matches none of
//     the chart's selectors, and its objects are deleted once it succeeds.
//   - The rendered StatefulSet is run: its command, arguments and
//     environment (fieldRefs, configMapKeyRefs and $(VAR) expansion
//     resolved as the kubelet does) start three real processes on
//     127.0.0.31-33, standing in for three pod IPs; the only rewriting is
//     the pod network (DNS names and 0.0.0.0 to the pod's loopback IP) and
//     the volume mounts (to temporary directories). The test stops exactly
//     the processes it started.
//   - The certs-init hook runs as rendered too: its ServiceAccount, Role and
//     RoleBinding are created in that cluster and its Job's command runs
//     with the ServiceAccount's token (standing in for the in-cluster
//     configuration), so the Role is shown to be enough, and no more.
package chart
