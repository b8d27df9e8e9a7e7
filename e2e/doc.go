// Package e2e holds trustplane's end-to-end scenarios: tests that build the
// binary, start real nodes on loopback ports (one node, or clusters of
// three and five that form through gossip) and drive them with client-go,
// kubectl and plain HTTPS, as users do.
//
// Rules it keeps:
//   - Real parts only: the real binary, real TLS, real raft with fsync,
//     real kubectl. Nothing is mocked.
//   - Every scenario owns what it starts (processes, ports, data
//     directories) and stops it when it ends; every wait is bounded, and
//     every address is loopback.
//   - One harness, two targets. By default each scenario starts the
//     trustplane processes it needs. With TRUSTPLANE_E2E_KUBECONFIG set,
//     the single-node scenarios run against that server instead (another
//     trustplane cluster, or kube-apiserver from make reference), so that
//     the same scenarios show where behaviour differs; scenarios that must
//     own a process (restarts, kills, server flags, several nodes, the data
//     directory) skip with the reason. TRUSTPLANE_E2E_CA_DIR gives the
//     server's client CA (ca.crt, ca.key) to scenarios that act as other
//     users. Where trustplane knowingly differs from kube-apiserver
//     (docs/COMPATIBILITY.md), a scenario checks that part only when the
//     server is trustplane (isTrustplane, trustplaneOnly), naming the
//     difference when it skips; everything else is asserted on both. An
//     external server keeps what earlier scenarios wrote, so one that
//     writes under fixed names deletes them first and last (scrub), and
//     the admin's user name is asked of the server (whoami), not assumed.
//   - Scenarios that mostly wait (for a controller, an election, a lease
//     to expire) and own all they start may run in parallel (t.Parallel):
//     go test runs those after the rest, -parallel (GOMAXPROCS) at a
//     time, which keeps the package inside its timeout. Not the ones on
//     the partition proxies' fixed loopback addresses (startProxiedCluster),
//     and not the ones that measure or starve the machine.
//   - No wall-clock assertions: timings are reported by the benchmarks
//     here (go test -bench), never asserted.
package e2e
