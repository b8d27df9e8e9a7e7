// Package chaos will own fault injection against real trustplane processes
// on loopback (kill, pause, restart, partition proxy), the workload, and the
// linearizability and watch checkers. Every loop is bounded in count and time.
//
// Nothing is here yet.
package chaos
