// Package gossipkeys is the gossip key as a rotation root (api/rotation):
// the keys gossip encrypts and decrypts with, replicated through Raft, and
// each node's memberlist keyring following them live.
//
// Rules it keeps:
//
//   - One record, in the internal key space, holds every key with its phase
//     (pending, active, retiring), sealed at rest as Secrets are. A step
//     rewrites it with one compare-and-swap.
//   - Every node applies the record to its keyring as soon as it applies
//     it, off the apply path (Run): the active key encrypts, every listed
//     key decrypts. So start brings a key in everywhere before promote
//     makes anyone send with it (promote waits until every member has
//     applied start), and finish drops the old key only once every member
//     sends with the new one: no node ever sends what a peer cannot read,
//     and membership does not flap.
//   - The file given by flag (<ca-dir>/gossip.key) seeds the record on the
//     first start (Seed); from then on the record is the truth. Each node
//     keeps a copy of the keyring it last applied in its data directory
//     (Local, 0600), and starts gossip with it, so a node restarted after a
//     rotation talks to its peers before it has replayed the log. A node
//     that joins later needs the active key in its gossip.key.
//   - A key is named by the first 8 bytes of its SHA-256 (hex); its bytes
//     appear in no status, error or log line.
package gossipkeys
