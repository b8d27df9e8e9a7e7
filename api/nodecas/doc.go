// Package nodecas is the node CA as a rotation root (api/rotation): the CAs
// whose certificates prove a node (Raft, the internal RPC, forwarded
// requests, X-Remote-* headers), replicated through Raft, and each node's
// trust and own certificate following them live.
//
// Rules it keeps:
//
//   - One record, in the internal key space, holds every node CA (its
//     certificate and private key) with its phase, sealed at rest as
//     Secrets are. A step rewrites it with one compare-and-swap. The CA
//     directory's node CA seeds it on the first start (Seed); from then on
//     the record is the truth.
//   - Every node trusts every CA of the record (pending, active and
//     retiring) as soon as it applies the record, on the apply path, so a
//     voter that has applied start accepts certificates of the new CA
//     before any node presents one (promote waits for every voter). While
//     a node replays its log it only adds CAs, never drops one, so that a
//     restarted node does not refuse its peers' current certificates for
//     a moment of history; and a record older than the one its trust file
//     is from (a restart from an older snapshot) changes nothing at all.
//   - Each node, once caught up, holds a certificate issued by the active
//     CA (Run): it issues itself a new one with the active CA's key after
//     promote or abort, writes it to its data directory, and presents it
//     from the next handshake on (certs.NodeCert); connections already
//     made with another certificate are closed (cluster.Node.Reconnect,
//     which also closes every connection, accepted or dialled, whose peer
//     the trust of the moment refuses). It reports the CA its certificate
//     is issued by to its peers (Fact, in the stats RPC), and finish waits
//     until every
//     voter presents the active CA's certificate, then drops the others:
//     a certificate only they issued stops working on every node at once.
//   - Each node keeps the CAs it trusts in its data directory (TrustFile,
//     certificates only), and starts with them, so a node restarted after
//     a rotation talks to its peers before it has replayed the log. A
//     node that joins later needs the active CA in its CA directory.
//   - A node CA is never the cluster CA or a signer's CA (start refuses
//     it), so no API user can obtain a certificate that passes for a node.
//   - A CA is named by the first 8 bytes of its certificate's SHA-256
//     (certs.CertID); its private key appears in no status, error or log.
package nodecas
