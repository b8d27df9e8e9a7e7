// Package rotation is the one model every trust root of a cluster is
// rotated by (issue 29): the cluster CA, the signer CAs, the node CA, the
// token signing keys, the encryption keys and the gossip key. A root is a
// set of keys replicated through Raft, each in one phase:
//
//   - pending: trusted, issues nothing (published first, so that relying
//     parties see the key before anything it signs);
//   - active: trusted, issues;
//   - retiring: trusted, issues no more (what it issued keeps working);
//   - then removed: trusted no more.
//
// An operator moves a root through four steps, each idempotent and safe to
// repeat after a leader change or a crash in its middle: start (a new
// pending key), promote (the pending key becomes active, the active one
// retiring), finish (retiring keys are removed) and abort (back to the
// previous active key, before finish). status says where the root is and
// what its next step waits for.
//
// It owns, and nothing else repeats:
//
//   - the phases, the steps and their names on the wire;
//   - the operator interface over the API: POST
//     /debug/trustplane/rotate/<root>/<step> (system:masters, run by the
//     leader), with ?force=true, answered with the root's Status as JSON;
//   - the refusal of a step the cluster is not ready for (ErrNotReady: 409
//     with the reason), and of an unknown root or step (404).
//
// Each root implements Root where its keys live (api/authn for the token
// signing keys); this package never reads or writes a key itself.
package rotation
