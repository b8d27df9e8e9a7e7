package authn

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/fsm"
)

// The token signing keys as a rotation root (api/rotation): every key is
// pending, active or retiring, and phases move in steps (start, promote,
// finish, abort) that an operator takes and that each node applies as
// soon as it applies the entry, without a restart.
//
// The phases of every key live in one record, phaseKey, beside the keys'
// material (one record per generation under keyPrefix). A step rewrites
// that record with one compare-and-swap, so every transition, however many
// keys it moves, is atomic: no node ever sees two keys active, or none,
// half-way through a step. Material is written before the record names it
// and tombstoned after the record drops it, so the record only ever names
// keys every node can load:
//
//   - a key whose material exists but which the record does not name
//     (a start that crashed between its two writes) is trusted by no one;
//     the next start adopts it;
//   - a key the record dropped (a finish that crashed before tombstoning)
//     is trusted by no one; the next step tombstones it.
//
// Before the first step the record does not exist: the newest key is
// active and the older ones retiring, which is what every earlier build
// did (the newest signs, all verify).

// phaseKey is the record of the keys' phases, in the internal key space.
var phaseKey = fsm.Key{Space: fsm.SpaceInternal, Resource: "signingkeyphases", Name: "phases"}

// phaseRecord is phaseKey's value: each listed generation's phase.
type phaseRecord struct {
	Keys map[string]keyPhase `json:"keys"`
}

// keyPhase is one key's phase and when it entered it, in Unix seconds as
// the leader's clock read them (0: unknown, a key made before phases).
type keyPhase struct {
	Phase   rotation.Phase `json:"phase"`
	Since   int64          `json:"since,omitempty"`
	Created int64          `json:"created,omitempty"`
}

// SigningKeyRoot is the root's name in the operator interface.
const SigningKeyRoot = "signing-key"

// keyEntry is one stored key as the phases make it.
type keyEntry struct {
	gen  string
	kv   *fsm.KV
	priv *ecdsa.PrivateKey // nil: a tombstone
	kid  string
	// phase is "" for a key nobody trusts (a tombstone, or material the
	// record does not name).
	phase          rotation.Phase
	since, created int64
}

// derivePhases applies the record (nil: none yet) to the stored keys,
// oldest first, and returns them newest first. Of several keys recorded
// active, only the newest is: the others are retiring, so that a record
// can never make two keys sign.
func derivePhases(entries []keyEntry, rec *phaseRecord) []keyEntry {
	out := make([]keyEntry, 0, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		out = append(out, entries[i])
	}
	active := false
	for i := range out {
		e := &out[i]
		if e.priv == nil {
			e.phase = ""
			continue
		}
		if rec == nil {
			e.phase = rotation.Retiring
			if !active {
				e.phase = rotation.Active
			}
		} else if p, ok := rec.Keys[e.gen]; ok {
			e.phase, e.since, e.created = p.Phase, p.Since, p.Created
		} else {
			e.phase = ""
		}
		if e.phase == rotation.Active {
			if active {
				e.phase = rotation.Retiring
			}
			active = true
		}
	}
	return out
}

// SetTokenLifetime tells finish how long a token a key signed may stay
// valid: kube's cap on TokenRequest (--service-account-max-token-expiration)
// or, when pod-bound tokens are extended, a year if longer. 0 means no
// bound, so finish needs --force (and token Secrets, which never expire,
// stop verifying at finish in any case, as they do in kube when their key
// file is removed).
func (k *KeyStore) SetTokenLifetime(maxExpiration time.Duration, extended bool) {
	d := maxExpiration
	if d > 0 && extended && d < extensionLifetime {
		d = extensionLifetime
	}
	k.tokenLifetime = d
}

// extensionLifetime is kube's extended expiration of pod-bound tokens.
const extensionLifetime = 365 * 24 * time.Hour

// SetMembers gives promote the members' applied indexes, by node name, so
// that it refuses until every member has applied the pending key. nil (one
// node, tests): the leader's own state is everyone's.
func (k *KeyStore) SetMembers(f rotation.Applied) { k.members = f }

// SetClock replaces the clock that stamps phases (tests).
func (k *KeyStore) SetClock(now func() time.Time) { k.now = now }

// Root is the token signing keys as a rotation root.
func (k *KeyStore) Root() rotation.Root { return keyRoot{k} }

type keyRoot struct{ k *KeyStore }

// state reads the stored keys and the phase record, as every step starts.
type keyState struct {
	entries []keyEntry // newest first
	rec     *phaseRecord
	recKV   *fsm.KV
}

func (k *KeyStore) state() (*keyState, error) {
	res, err := k.backend.List(keyPrefix, fsm.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("authn: reading signing keys: %w", err)
	}
	rec, recKV, err := k.readRecord()
	if err != nil {
		return nil, err
	}
	entries, err := k.parseEntries(res.KVs)
	if err != nil {
		return nil, err
	}
	for i := range entries {
		if p := entries[i].priv; p != nil {
			if entries[i].kid, err = keyID(context.Background(), p); err != nil {
				return nil, err
			}
		}
	}
	return &keyState{entries: derivePhases(entries, rec), rec: rec, recKV: recKV}, nil
}

// parseEntries decrypts and parses the stored keys kvs, oldest first.
func (k *KeyStore) parseEntries(kvs []*fsm.KV) ([]keyEntry, error) {
	entries := make([]keyEntry, 0, len(kvs))
	for _, kv := range kvs {
		priv, err := k.parseKey(kv)
		if err != nil {
			return nil, err
		}
		entries = append(entries, keyEntry{gen: kv.Key.Name, kv: kv, priv: priv})
	}
	return entries, nil
}

// readRecord reads the phase record; nil when no step has been taken.
func (k *KeyStore) readRecord() (*phaseRecord, *fsm.KV, error) {
	res, err := k.backend.List(fsm.Prefix{Space: phaseKey.Space, Resource: phaseKey.Resource}, fsm.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("authn: reading signing key phases: %w", err)
	}
	for _, kv := range res.KVs {
		if kv.Key != phaseKey {
			continue
		}
		var rec phaseRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Keys == nil {
			// The message names the record, never its bytes.
			return nil, nil, fmt.Errorf("%w: the phase record is unreadable", ErrBadKey)
		}
		return &rec, kv, nil
	}
	return nil, nil, nil
}

// record is the phase record st implies, to be changed by a step: the
// trusted keys with their phases (a record for keys derived before any).
func (st *keyState) record() *phaseRecord {
	rec := &phaseRecord{Keys: map[string]keyPhase{}}
	for _, e := range st.entries {
		if e.phase != "" {
			rec.Keys[e.gen] = keyPhase{Phase: e.phase, Since: e.since, Created: e.created}
		}
	}
	return rec
}

// rotationEntries are the trusted keys as the shared transitions take them
// (api/rotation): newest first, named by kid.
func (st *keyState) rotationEntries() []rotation.Entry {
	var out []rotation.Entry
	for _, e := range st.entries {
		if e.phase != "" {
			out = append(out, rotation.Entry{ID: e.kid, Phase: e.phase, Since: e.since, Created: e.created})
		}
	}
	return out
}

// recordFrom is the phase record of es, by generation; added names the
// generation of a kid st does not hold yet (a key start just made).
func (st *keyState) recordFrom(es []rotation.Entry, added map[string]string) *phaseRecord {
	gens := map[string]string{}
	for _, e := range st.entries {
		gens[e.kid] = e.gen
	}
	for kid, gen := range added {
		gens[kid] = gen
	}
	rec := &phaseRecord{Keys: map[string]keyPhase{}}
	for _, e := range es {
		rec.Keys[gens[e.ID]] = keyPhase{Phase: e.Phase, Since: e.Since, Created: e.Created}
	}
	return rec
}

// writeRecord stores rec with a compare-and-swap on the record st read.
func (k *KeyStore) writeRecord(ctx context.Context, st *keyState, rec *phaseRecord) error {
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cmd := &fsm.Command{Op: fsm.OpPut, Key: phaseKey, Value: val}
	if st.recKV == nil {
		cmd.MustNotExist = true
	} else {
		cmd.ModRevision = st.recKV.ModRevision
	}
	res, err := k.backend.Propose(ctx, cmd)
	if err != nil {
		return fmt.Errorf("authn: writing signing key phases: %w", err)
	}
	if res.Err != nil {
		return fmt.Errorf("%w: the phases changed meanwhile (%v)", ErrKeyConflict, res.Err)
	}
	return nil
}

// first returns the newest entry in phase p, or nil.
func (st *keyState) first(p rotation.Phase) *keyEntry {
	for i := range st.entries {
		if st.entries[i].phase == p {
			return &st.entries[i]
		}
	}
	return nil
}

func (k *KeyStore) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// Status reports each key's phase, the members' view and the next step.
func (r keyRoot) Status(ctx context.Context) (*rotation.Status, error) {
	st, err := r.k.state()
	if err != nil {
		return nil, err
	}
	return r.k.status(ctx, st, ""), nil
}

func (k *KeyStore) status(ctx context.Context, st *keyState, done string) *rotation.Status {
	out := &rotation.Status{Root: SigningKeyRoot, Done: done, Keys: []rotation.Key{}}
	for _, e := range st.entries {
		if e.phase == "" {
			continue
		}
		key := rotation.Key{ID: e.kid, Phase: e.phase, Issues: e.phase == rotation.Active}
		if e.since > 0 {
			key.Since = time.Unix(e.since, 0).UTC()
		}
		if e.created > 0 {
			key.Created = time.Unix(e.created, 0).UTC()
		}
		out.Keys = append(out.Keys, key)
	}
	members, lacking := k.memberView(ctx, st)
	out.Members = members
	switch {
	case st.first(rotation.Pending) != nil:
		out.Next, out.Waiting = rotation.StepPromote, lacking
	case st.first(rotation.Retiring) != nil:
		out.Next = rotation.StepFinish
		if err := k.finishReady(st); err != nil {
			out.Waiting = err.Error()
		}
	}
	return out
}

// memberView is every voter's view of the keys (rotation.Members): whether
// it has applied the phase record the leader holds.
func (k *KeyStore) memberView(ctx context.Context, st *keyState) ([]rotation.Member, string) {
	var rev uint64
	if st.recKV != nil {
		rev = st.recKV.ModRevision
	}
	return rotation.Members(ctx, k.members, rev, "the pending key")
}

// Start makes a new pending key: trusted on every node (published in the
// JWKS) once applied, signing nothing until promote. With a pending key
// already there it changes nothing.
func (r keyRoot) Start(ctx context.Context, _ rotation.Options) (*rotation.Status, error) {
	k := r.k
	st, err := k.state()
	if err != nil {
		return nil, err
	}
	if p := st.first(rotation.Pending); p != nil {
		return k.status(ctx, st, "key "+p.kid+" is pending already"), nil
	}
	if st.first(rotation.Retiring) != nil {
		return nil, fmt.Errorf("%w: a retiring key is still trusted; finish (or abort) the last rotation first", rotation.ErrNotReady)
	}
	if st.recKV == nil {
		// The first step: record the phases derived so far, so that the
		// key made below is judged against a record (unnamed, untrusted)
		// if this start stops before naming it.
		if err := k.writeRecord(ctx, st, st.record()); err != nil {
			return nil, err
		}
		if st, err = k.state(); err != nil {
			return nil, err
		}
	}
	// Material written after the record's last change, which the record
	// does not name: a start that stopped between its writes. Adopt it.
	var gen, kid string
	if len(st.entries) > 0 && st.startInProgress(st.entries[0]) {
		gen, kid = st.entries[0].gen, st.entries[0].kid
	} else {
		next := uint64(1)
		if len(st.entries) > 0 {
			last, err := strconv.ParseUint(st.entries[0].gen, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: generation %q", ErrBadKey, st.entries[0].gen)
			}
			next = last + 1
		}
		if kid, err = k.put(ctx, next); err != nil {
			return nil, err
		}
		gen = keyName(next).Name
	}
	es, err := rotation.AddPending(st.rotationEntries(), kid, k.clock().Unix())
	if err != nil {
		return nil, err
	}
	if err := k.writeRecord(ctx, st, st.recordFrom(es, map[string]string{kid: gen})); err != nil {
		return nil, err
	}
	return k.after(ctx, "started: key "+kid+" is pending")
}

// after re-reads the state for the status a step answers with.
func (k *KeyStore) after(ctx context.Context, done string) (*rotation.Status, error) {
	st, err := k.state()
	if err != nil {
		return nil, err
	}
	return k.status(ctx, st, done), nil
}

// Promote makes the pending key active and the active one retiring, in one
// write: new tokens are signed by the new key on every node as it applies
// it, and tokens the old one signed keep verifying. It refuses until every
// member has applied the pending key (unless forced), so that no node
// meets a token signed by a key it does not trust yet.
func (r keyRoot) Promote(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	k := r.k
	st, err := k.state()
	if err != nil {
		return nil, err
	}
	es, p, err := rotation.Promote(st.rotationEntries(), k.clock().Unix())
	if err != nil {
		return nil, err
	}
	if _, lacking := k.memberView(ctx, st); lacking != "" && !o.Force {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, lacking)
	}
	if err := k.writeRecord(ctx, st, st.recordFrom(es, nil)); err != nil {
		return nil, err
	}
	return k.after(ctx, "promoted: key "+p.ID+" signs new tokens")
}

// finishReady says why finish must wait: a retiring key may still have
// valid tokens out.
func (k *KeyStore) finishReady(st *keyState) error {
	now := k.clock()
	for _, e := range st.entries {
		if e.phase != rotation.Retiring {
			continue
		}
		switch {
		case k.tokenLifetime <= 0:
			return fmt.Errorf("%w: tokens signed by key %s have no bounded lifetime (no --service-account-max-token-expiration); finish stops them verifying: pass --force", rotation.ErrNotReady, e.kid)
		case e.since == 0:
			return fmt.Errorf("%w: key %s was retired before phases were recorded, so when its last token expires is unknown: pass --force", rotation.ErrNotReady, e.kid)
		}
		if until := time.Unix(e.since, 0).Add(k.tokenLifetime); now.Before(until) {
			return fmt.Errorf("%w: tokens signed by key %s may be valid until %s; finish then, or pass --force", rotation.ErrNotReady, e.kid, until.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// Finish removes the retiring keys: tokens they signed stop verifying on
// every node once it applies the step (and its token cache expires), and
// their private bytes leave the replicated state. It refuses while their
// tokens may be valid, unless forced.
func (r keyRoot) Finish(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	k := r.k
	st, err := k.state()
	if err != nil {
		return nil, err
	}
	var gone []string
	if st.first(rotation.Retiring) != nil {
		if err := k.finishReady(st); err != nil && !o.Force {
			return nil, err
		}
		kept, removed := rotation.Finish(st.rotationEntries())
		for _, e := range removed {
			gone = append(gone, e.ID)
		}
		if err := k.writeRecord(ctx, st, st.recordFrom(kept, nil)); err != nil {
			return nil, err
		}
		if st, err = k.state(); err != nil {
			return nil, err
		}
	}
	if err := k.tombstoneUntrusted(ctx, st); err != nil {
		return nil, err
	}
	if len(gone) == 0 {
		return k.after(ctx, "no retiring key to remove")
	}
	return k.after(ctx, fmt.Sprintf("finished: keys %v removed", gone))
}

// startInProgress says whether e is the material of a start that stopped
// between its two writes: live, unnamed by the record, and first written
// (created) after the record's last change, so no step has ever named (or
// dropped) it. Material the record dropped (finished, aborted) was created
// before the record changed and is never adopted again. CreateRevision,
// not ModRevision: re-encryption (Reencrypt, the encryption key's rewrite,
// docs/REDTEAM-encryption-keys.md RT-3) writes material again without making it new.
func (st *keyState) startInProgress(e keyEntry) bool {
	return e.priv != nil && e.phase == "" && st.recKV != nil && e.kv.CreateRevision > st.recKV.ModRevision
}

// tombstoneUntrusted replaces the material of every key the record does
// not name, but a start in progress, with a tombstone: its private bytes
// leave the replicated state, and it can never be trusted again.
func (k *KeyStore) tombstoneUntrusted(ctx context.Context, st *keyState) error {
	if st.rec == nil {
		return nil
	}
	tomb, err := json.Marshal(storedKey{Retired: true})
	if err != nil {
		return err
	}
	for _, e := range st.entries {
		if e.phase != "" || e.priv == nil || st.startInProgress(e) {
			continue
		}
		if err := k.rewrite(ctx, e.kv, tomb); err != nil && !errors.Is(err, ErrKeyConflict) {
			return err
		}
	}
	return nil
}

// Abort undoes the rotation in progress: a pending key is dropped (it
// signed nothing); after promote, the retiring key signs again and the
// promoted one retires, so the tokens it signed keep verifying until a
// finish removes it.
func (r keyRoot) Abort(ctx context.Context, _ rotation.Options) (*rotation.Status, error) {
	k := r.k
	st, err := k.state()
	if err != nil {
		return nil, err
	}
	var drop *fsm.KV
	if p := st.first(rotation.Pending); p != nil {
		drop = p.kv
	}
	es, done, err := rotation.Abort(st.rotationEntries(), k.clock().Unix())
	if err != nil {
		return nil, err
	}
	if err := k.writeRecord(ctx, st, st.recordFrom(es, nil)); err != nil {
		return nil, err
	}
	if drop != nil {
		// The dropped key is the newest material: tombstone it here, or
		// the next start would adopt it as a start in progress.
		tomb, err := json.Marshal(storedKey{Retired: true})
		if err != nil {
			return nil, err
		}
		if err := k.rewrite(ctx, drop, tomb); err != nil && !errors.Is(err, ErrKeyConflict) {
			return nil, err
		}
	}
	return k.after(ctx, "aborted: "+done)
}

// PhaseCounts counts this node's signing keys by phase, as it has applied
// them (the trustplane_trust_root_keys gauge).
func (k *KeyStore) PhaseCounts() (map[rotation.Phase]int, error) {
	st, err := k.state()
	if err != nil {
		return nil, err
	}
	out := map[rotation.Phase]int{rotation.Pending: 0, rotation.Active: 0, rotation.Retiring: 0}
	for _, e := range st.entries {
		if e.phase != "" {
			out[e.phase]++
		}
	}
	return out, nil
}
