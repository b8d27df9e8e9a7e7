// Package connlimit bounds the connections a listener has accepted but
// that have not yet proved to be clients: the pending table of the API,
// Raft and gossip ports. It is the one implementation all three use.
//
// A pending connection is one that has been accepted and has not yet been
// declared established by its owner (the API's first request, Raft's first
// byte after the TLS handshake) or closed. A connection that is pending
// costs the node a goroutine, a socket and, for TLS, a handshake; one that
// never sends anything costs the same, which is what an unauthenticated
// client can exploit.
//
// Rules it keeps:
//
//   - A new connection always gets a slot. When the table is full, the
//     oldest pending connection is closed to make room, never the newest:
//     a table kept full by idle sockets then cannot lock a client out,
//     because the client's connection pushes an idle one out (a refusal
//     of the newest would hand the table to whoever filled it first).
//   - One source (an IPv4 address, or an IPv6 /64, which one host usually
//     owns whole) holds at most PerSource slots. A source at its share
//     makes room by losing its own oldest pending connection, so a single
//     address can never push out the connections of any other: only
//     MaxPending/PerSource distinct sources together can fill the table.
//   - A connection that has not sent its first byte within
//     FirstByteTimeout (for TLS, the ClientHello) is closed; one that is
//     still pending after Timeout (the whole TLS handshake) is closed too.
//     Established connections are never touched: no deadline, no
//     eviction.
//   - Drops are counted by reason (Reason), reported to Prometheus
//     (Collector), and logged at warn level rate-limited: the first drop
//     at once, then at most one line per LogEvery, with the counts since
//     the last line. A flood never writes one line per connection.
//   - Time comes from Config.Clock, so tests drive every timer without
//     sleeping.
//
// What it does not do: it reads nothing from a connection, and it never
// refuses one at accept. Deciding what a connection's first bytes mean
// (a TLS handshake, gossip framing) is the owner's job; an owner that
// refuses a connection says so with Conn.Reject, which counts and logs it
// with the other drops.
package connlimit
