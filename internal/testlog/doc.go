// Package testlog is a log destination for tests: the lines a node, a
// listener or an authenticator writes from its own goroutines, read by
// the test while they go on writing. It owns one rule: every write and
// every read of the buffer holds its lock, so a test may look at the log
// at any moment (and under -race). With TRUSTPLANE_TEST_LOG set, each
// line is also copied to standard error, to watch a failing test live.
// Tests only; the server never imports it.
package testlog
