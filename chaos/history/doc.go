// Package history is the record a chaos run keeps: every operation the
// workload sent with what it was answered, every watch event each node
// delivered, and each node's final state. The workload writes it, the
// checkers read it, and it round-trips through JSON so a run's history can
// be checked again later ("trustplane chaos check").
//
// Rules it keeps:
//   - Times are nanoseconds since the run's start on one monotonic clock,
//     so Call < Return always holds for one operation.
//   - Every value a write sends is unique in the run: a value found in the
//     log names exactly one write.
//   - An Outcome says what the client knows, never what it guesses: an
//     answer that does not say whether a write happened is Unknown.
package history
