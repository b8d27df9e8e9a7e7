//go:build unix

package main

import "syscall"

// privateFiles makes every file and directory serve creates private to its
// user: 0600 and 0700 at most. Our own code asks for those modes already;
// raft's snapshot store asks for 0755 directories and 0644 files, and a
// snapshot holds every Secret.
func privateFiles() { syscall.Umask(0o077) }
