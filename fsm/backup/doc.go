// Package backup owns the backup file of `trustplane snapshot save`,
// `inspect` and `restore`: a point-in-time copy of a cluster's replicated
// state together with what it takes to trust it and to seed a new cluster
// from it.
//
// File format, version 1 (all integers big-endian):
//
//	[8]byte  magic "TPBACKUP"
//	uint32   format version (1)
//	uint32   header length n (at most maxHeader)
//	[n]byte  header, JSON (Header)
//	...      state: the fsm snapshot format (fsm.Export.WriteTo), with its
//	         own CRC-32C
//	uint64   length of the state
//	[32]byte SHA-256 of every byte before it
//	[8]byte  end magic "TPBKEND\n"
//
// The state's length is in the trailer, not the header, so a node streams
// the file as it serialises the state and never buffers it.
//
// Rules it keeps:
//
//   - Nothing is trusted before it is verified: Open checks the magic, the
//     version, the end marker and the SHA-256 over the whole file before it
//     parses the header, and Load parses the state only from a verified
//     file and checks that the state's applied index is the header's
//     Index. Every refusal wraps one sentinel (the var block in backup.go) saying which
//     check failed: not a backup, unsupported version, truncated, checksum
//     mismatch, corrupt.
//   - A file is read, never modified; writing one goes through a temporary
//     file that is verified and then linked into place, never over an
//     existing file (cmd/trustplane).
//   - The package knows the file, not the cluster: which keys of the state
//     are cluster-specific, and how raft's stores are seeded, is cluster's
//     business (cluster.SeedDataDir). Summaries read keys and the
//     at-rest encryption prefix of values, never decrypt or decode them.
//
// It lives under fsm because the file is the fsm's state plus what it
// takes to trust it; it imports only fsm from trustplane, and fsm never
// imports it.
package backup
