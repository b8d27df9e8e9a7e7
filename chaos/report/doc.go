// Package report turns a chaos run's history, its faults and the
// checkers' results into what an operator reads: a verdict, the
// availability timeline (answers, errors and p99 latency per second), and
// how long each fault kept writes from succeeding.
//
// Rules it keeps:
//   - The verdict is PASS only when every checker that ran passed; a
//     checker that could not decide (a linearizability search that timed
//     out) makes the verdict INCONCLUSIVE, never PASS.
//   - Figures come from the client's side only: what the workload was
//     answered and when.
package report
