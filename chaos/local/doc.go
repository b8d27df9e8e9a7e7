// Package local runs a chaos target of its own: N trustplane processes of
// one binary on loopback, each on its own loopback IP (127.0.0.11, .12,
// ...) so that fault proxies in front of every node's Raft and gossip
// ports can tell which peer a connection or packet comes from.
//
// It owns those processes and proxies and the faults only it can cause:
// SIGKILL, SIGTERM and SIGSTOP/SIGCONT of a process, partitions (both
// ways, one way, delay) between chosen nodes, and, when the binary was
// built with -tags failpoints, a slow fsync or a full disk on one node.
//
// Rules it keeps:
//   - It stops only the processes it started, by PID, and Close stops all
//     of them, whatever state they were left in (a paused process is
//     continued first so it can die).
//   - Every wait is bounded.
//   - A node keeps its data directory and ports across restarts, so a
//     restart is the same member coming back.
package local
