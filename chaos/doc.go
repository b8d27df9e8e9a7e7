// Package chaos is "trustplane chaos": it runs a workload against a
// trustplane cluster while a nemesis kills, pauses, restarts and
// partitions its nodes (and, with failpoints, slows or fills their
// disks), then checks what the clients saw.
//
// The package owns the run: the Target a run hurts (local processes in
// chaos/local, or a cluster reached through kubeconfigs and commands in
// attach mode), the nemesis that injects one fault at a time and waits
// for recovery, the leader monitor, and the order of a run (prepare, run,
// heal, settle, check, report). The record is chaos/history, the clients
// chaos/workload, the checkers chaos/check, the report chaos/report.
//
// Rules it keeps:
//   - Every loop is bounded in count and time; a run stops by itself.
//   - A fault is always undone, whatever ends the run, and the cluster is
//     healed before the final states are read.
//   - Recovery from a fault is every node ready and caught up with what
//     the leader had committed (catchup.go): the checks that need the
//     faults themselves (rotation, catch-up) live here, the others in
//     chaos/check.
//   - Only loopback addresses in local mode; only the commands the
//     operator gave in attach mode.
package chaos
