// Command trustplane runs a node of the trustplane control plane.
//
//	trustplane [serve] [flags]   run a node (the default command)
//	trustplane certs init --dir D  create a shared cluster CA, node CA and gossip key
//	trustplane members [remove N]  list nodes, or remove a voter for good (until
//	                               it returns with an empty data dir)
//	trustplane snapshot save|inspect|restore
//	                               back up a running cluster (any node, after a
//	                               read index), verify a backup, seed a new
//	                               one-voter cluster from one (docs/OPERATIONS.md)
//
// Flags fill config structs here and nowhere else; every flag has an
// environment-variable twin (TRUSTPLANE_<FLAG>, dashes as underscores).
//
// This package owns flags, configuration structs and wiring only: it reads
// every flag (and its TRUSTPLANE_* environment twin) into the config structs
// of the packages it starts, and nowhere else are flags read. It holds no
// Kubernetes rules of its own.
package main
