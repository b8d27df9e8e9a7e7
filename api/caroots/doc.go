// Package caroots is a certificate authority as a rotation root
// (api/rotation): the CAs of one kind, replicated through Raft, and each
// node's trust and own certificate following them live. Two kinds use it
// (Kind): the node CA, whose certificates prove a node (Raft, the internal
// RPC, forwarded requests, X-Remote-* headers), and the cluster CA, which
// verifies API client certificates and issues the nodes' serving
// certificates.
//
// Rules it keeps:
//
//   - One record per kind, in the internal key space, holds every CA (its
//     certificate and private key) with its phase, sealed at rest as
//     Secrets are. A step rewrites it with one compare-and-swap. The CA
//     directory's CA seeds it on the first start (Seed); from then on the
//     record is the truth.
//   - Every node trusts every CA of the record (pending, active and
//     retiring) as soon as it applies the record, on the apply path, so a
//     voter that has applied start accepts certificates of the new CA
//     before any node presents one (promote waits for every member). While
//     a node replays its log it only adds CAs, never drops one, so that a
//     restarted node does not refuse its peers' or its clients' current
//     certificates for a moment of history; and a record older than the
//     one its trust file is from (a restart from an older snapshot)
//     changes nothing at all.
//   - Each node, once caught up, holds a certificate issued by the active
//     CA (Run): it issues itself a new one with the active CA's key after
//     promote or abort, writes it to its data directory, and presents it
//     from the next handshake on. For a kind whose certificate clients
//     verify (Kind.Chain: the serving certificate), it presents with it
//     the active CA cross-signed by every other CA of the record, so that
//     a client that trusts only the previous CA, or only the next, still
//     verifies it until finish. It reports the CA its certificate is
//     issued by to its peers (Facts, in the stats RPC), and finish waits
//     until every member presents the active CA's certificate, then drops
//     the others: a certificate only they issued stops working on every
//     node at once.
//   - Each node keeps the CAs it trusts in its data directory (TrustFile,
//     certificates only), and starts with them, so a node restarted after
//     a rotation talks to its peers and its clients before it has
//     replayed the log. A node that joins later needs the active CA in
//     its CA directory.
//   - A CA of one kind is never a CA of another (Config.Forbidden, which
//     start refuses): no API user can obtain a certificate that passes
//     for a node.
//   - A CA is named by the first 8 bytes of its certificate's SHA-256
//     (certs.CertID); its private key appears in no status, error or log.
package caroots
