// Package encryptionkeys is the encryption key as a rotation root
// (api/rotation): the data keys that encrypt stored values at rest,
// replicated through Raft, wrapped by the keys of the encryption
// configuration file, and rotated online.
//
// It is envelope encryption, as kube's KMS v2 does it:
//
//   - The file given by --encryption-provider-config holds the key
//     encryption keys. They seal one record, in the internal key space,
//     that holds every data key with its phase (pending, active,
//     retiring). The record is never sealed by a data key, so a data
//     directory, a snapshot or a backup without the file reveals no key
//     and no value.
//   - Before the first rotation there is no record, and values are sealed
//     by the file, as kube does ("file" is the active key). start adds a
//     pending data key (32 random bytes, kube's HKDF extended-nonce
//     AES-GCM, which no number of writes wears out): every node opens
//     values sealed with it once it has applied the record, none seals
//     with it. promote (once every member has applied start) makes every
//     node seal with it; the leader then rewrites, in the background and
//     rate-limited, every stored value still sealed with another key
//     (Secrets, the token signing keys, the gossip keyring and whatever
//     else the file encrypts), with a compare-and-swap per value, so a
//     concurrent write is never undone, and resumes on whichever node
//     leads next. finish removes the retiring keys: refused while a value
//     is still sealed with one (never forced: it would make those values
//     unreadable), and, unless forced, until compaction has dropped the
//     history from before the rewrite ended. abort brings back the
//     previous key as active, and the rewrite moves values back to it.
//   - A value sealed with a data key starts with Prefix, the key's id and
//     a colon. Every resource's transformer opens such a value, whatever
//     the file says of its resource; a value is sealed with the active
//     data key only for resources the file encrypts (its first provider
//     is not identity). A value that is not encrypted is never rewritten.
//   - Every node applies the record as it applies the entry (OnApply, on
//     the apply path, before the listeners subscribed after it, such as
//     the watch cache), and reads it again whenever it meets a value
//     sealed with a key it does not hold yet; a node replaying its log
//     therefore always holds the key of every value it reads, since the
//     record that brought a key in precedes every value sealed with it.
//   - A key is named by the first 8 bytes of its SHA-256 (hex); its bytes
//     appear in no status, error, log line or response.
package encryptionkeys
