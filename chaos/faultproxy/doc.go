// Package faultproxy owns the network faults the chaos tool injects
// between real trustplane nodes on loopback: a TCP proxy (raft, the
// internal RPC, gossip's TCP, forwarded API writes) and a UDP relay
// (gossip), each standing in front of one node's real port. The node
// advertises the proxy's address, so its peers reach it only through the
// proxy.
//
// ListenNode starts the set one node needs (raft, gossip TCP and UDP on one
// port, API) and sets rules on all of them at once. The address plan the
// e2e test uses: node i binds 127.0.0.(10+i) for its API, raft and gossip;
// its raft and gossip proxies listen on the same IP; its API proxy on
// 127.0.0.(20+i) with the API's own port, because --advertise-address
// gives a host only.
//
// The proxy tells senders apart by source IP: node i binds, and since
// dialsrc dials from, its own loopback IP 127.0.0.(10+i). Rules are set per
// source IP at run time and apply at once, to new and to established
// connections alike.
//
// Directions are named from the proxied node's side: inbound is from the
// source to the node behind the proxy, outbound is the node's answer on
// the same connection (or, for UDP, the reply relayed back to the source
// address).
//
// What a rule does (Rule):
//
//   - Drop: a full partition from that source. TCP bytes in both
//     directions are held back (not read further, not delivered) until the
//     rule is lifted; a new connection is accepted by the proxy but never
//     reaches the node. UDP packets in both directions are discarded.
//   - DropInbound: only source→node traffic is lost. For raft, when the
//     leader is the source: its AppendEntries and heartbeats never reach
//     the follower, which calls an election; the leader's own view of the
//     follower only times out.
//   - DropOutbound: only node→source traffic is lost. For raft, with the
//     leader as source: the follower receives and applies AppendEntries
//     (and so keeps its election timer reset) but the leader never hears
//     the answers, so it cannot commit with that follower and its pipeline
//     to it times out.
//   - Delay: added latency, per chunk (TCP) or packet (UDP), both
//     directions. Chunks are delayed in a pipeline, so latency does not
//     reduce throughput more than the bounded buffers do.
//
// A raft connection is opened by the side that sends requests (the leader
// for AppendEntries, a candidate for RequestVote), so a one-way partition
// "A does not hear B" is DropOutbound for source A on B's proxy plus
// DropInbound for source B on A's proxy. Drop on both proxies, for each
// other's IPs, is a full partition.
//
// Rules it keeps:
//
//   - A TCP drop black-holes, it never resets: held bytes stay in the
//     proxy and the kernel buffers, so both ends see silence and time out,
//     as over a real partition. When the rule is lifted the held bytes are
//     delivered in order, as TCP retransmission would after a heal (a
//     connection an end has given up on meanwhile then fails on its own).
//   - A new TCP connection needs both directions (SYN, SYN-ACK): under any
//     drop rule it waits at the proxy, without a connection to the node,
//     until the rule allows both. Its client sees a connected but silent
//     peer.
//   - Towards the node the proxy dials from the source's IP when dialsrc
//     allows (loopback to loopback), so the node sees the same peer
//     address it would see without the proxy.
//   - Everything is bounded: connections (MaxConns), UDP sessions
//     (MaxSessions, idle ones expire), delayed packets in flight, bytes
//     buffered per direction. Close stops every goroutine and returns
//     after they have ended.
package faultproxy
