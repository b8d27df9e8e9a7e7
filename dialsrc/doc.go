// Package dialsrc owns one rule: which local address a node's outbound
// connection starts from.
//
// A node bound to a specific address (--raft-addr 127.0.0.11:…, or a pod
// IP) should be seen by its peers as that address, not as whatever the
// kernel picks for the route (on loopback that is always 127.0.0.1). The
// chaos tool relies on it: its fault proxies tell senders apart by source
// IP.
//
// Rules it keeps:
//
//   - The source is bound only when the bind host is a specific IP
//     address (not empty, not 0.0.0.0 or ::, not a host name) and the
//     destination host is an IP address of the same class: a loopback bind
//     only for loopback destinations, a non-loopback bind only for
//     non-loopback ones, and the same family (IPv4 or IPv6). In every other
//     case the kernel chooses, as before. A node bound to every interface,
//     or dialling a peer by name, is therefore unchanged.
//   - Only the address is bound, never the port (port 0): many
//     connections may start from the same address.
//
// This package imports nothing of trustplane.
package dialsrc
