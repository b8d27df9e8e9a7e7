package encryptionkeys

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"strings"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// Root is the encryption key as a rotation root. export reads the whole
// state at one revision, for the count of values by key (census); atRestOf
// says which stored values are sealed at all (storage.Storage.AtRestOf).
func (s *Store) Root(export func() *fsm.Export, atRestOf func(fsm.Key) storage.AtRest) rotation.Root {
	return root{s: s, export: export, atRestOf: atRestOf}
}

type root struct {
	s        *Store
	export   func() *fsm.Export
	atRestOf func(fsm.Key) storage.AtRest
}

var errNoFile = fmt.Errorf("%w: no --encryption-provider-config: nothing is encrypted at rest, so there is no key to rotate", rotation.ErrNotReady)

// load reads the record a step starts from; before the first rotation it
// is the file's keys alone, not stored yet (kv nil).
func (r root) load() (*record, *fsm.KV, error) {
	if r.s.cfg.File == nil {
		return nil, nil, errNoFile
	}
	rec, kv, err := r.s.read()
	if err == nil && rec == nil {
		rec = fileOnly()
	}
	return rec, kv, err
}

// census counts the encrypted values by the key they are sealed with, at
// one revision, leaving out the record itself and the records that are
// never sealed (whatever their bytes look like).
func (r root) census() (byKey map[string]int, rev uint64) {
	exp := r.export()
	byKey = map[string]int{}
	exp.Live(func(kv *fsm.KV) bool {
		if kv.Key != recordKey && !r.atRestOf(kv.Key).Identity() {
			if id := SealedWith(kv.Value); id != "" {
				byKey[id]++
			}
		}
		return true
	})
	return byKey, exp.Index()
}

// sealed renders a census for status.
func sealed(byKey map[string]int, rev uint64) string {
	ids := make([]string, 0, len(byKey))
	for id := range byKey {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%d with %s", byKey[id], id))
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	return fmt.Sprintf("encrypted values at revision %d: %s", rev, strings.Join(parts, ", "))
}

// builds refuses a step that brings in or uses a data key while a voter
// runs a build that cannot open values sealed with one; --force does not
// override it, since those reads would fail.
func (r root) builds(ctx context.Context) error {
	return rotation.Builds(ctx, r.s.cfg.Unable, "cannot open values sealed with a data key")
}

// members is every voter's view of the record (rotation.Members).
func (r root) members(ctx context.Context, kv *fsm.KV) ([]rotation.Member, string) {
	if kv == nil {
		return nil, ""
	}
	return rotation.Members(ctx, r.s.cfg.Members, kv.ModRevision, "the encryption keys")
}

// finishWaits says why finish would be refused now ("" if it would not),
// and whether --force may override it.
func (r root) finishWaits(rec *record, byKey map[string]int) (why string, forceable bool) {
	for _, e := range rec.Keys {
		if e.Phase == rotation.Retiring && byKey[e.ID] > 0 {
			return fmt.Sprintf("%d values are still sealed with the retiring key %s; the leader is rewriting them (progress below)", byKey[e.ID], e.ID), false
		}
	}
	if rec.Rewritten == 0 {
		return "the leader has not yet checked that no value is sealed with a retiring key", false
	}
	if c := r.export().CompactedRevision(); c < rec.Rewritten {
		return fmt.Sprintf("revisions before %d (compacted up to %d) are kept as history (--compact-retention) and may hold values sealed with a retiring key, which finish makes unreadable; --force takes it now", rec.Rewritten, c), true
	}
	return "", false
}

func (r root) status(ctx context.Context, done string) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es := rec.entries()
	byKey, rev := r.census()
	st := &rotation.Status{Root: Root, Keys: rotation.Keys(es), Done: done, Progress: sealed(byKey, rev)}
	if p := r.s.progress.Load(); p != nil {
		st.Progress += "; " + *p
	}
	var lacking string
	st.Members, lacking = r.members(ctx, kv)
	switch {
	case rotation.First(es, rotation.Pending) != nil:
		st.Next, st.Waiting = rotation.StepPromote, lacking
	case rotation.First(es, rotation.Retiring) != nil:
		st.Next = rotation.StepFinish
		if st.Waiting = lacking; lacking == "" {
			st.Waiting, _ = r.finishWaits(rec, byKey)
		}
	}
	return st, nil
}

// Status reports each key's phase (by id, never its bytes), the voters'
// view, how many values each key seals, and the next step.
func (r root) Status(ctx context.Context) (*rotation.Status, error) { return r.status(ctx, "") }

// Start adds a new pending data key: every node opens values sealed with
// it once applied, none seals with it yet.
func (r root) Start(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	if o.Key != nil {
		return nil, fmt.Errorf("%w: the cluster makes its encryption keys itself; a key file is for the gossip key", rotation.ErrNotReady)
	}
	if !r.s.covers(secrets, r.s.cfg.File.TransformerForResource(secrets)) {
		return nil, errNotEncrypted
	}
	if err := r.builds(ctx); err != nil {
		return nil, err
	}
	if p := rotation.First(rec.entries(), rotation.Pending); p != nil {
		return r.status(ctx, "key "+p.ID+" is pending already")
	}
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	id := KeyID(key)
	es, err := rotation.AddPending(rec.entries(), id, r.s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	next := rec.withEntries(es, map[string][]byte{id: key})
	next.Rewritten = rec.Rewritten
	if err := r.s.write(ctx, kv, next); err != nil {
		return nil, err
	}
	return r.status(ctx, "started: key "+id+" is pending")
}

// Promote makes every node seal with the pending key, once every voter
// opens values sealed with it (unless forced); the leader then rewrites
// every value sealed with another key.
func (r root) Promote(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es, p, err := rotation.Promote(rec.entries(), r.s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if err := r.builds(ctx); err != nil {
		return nil, err
	}
	if _, lacking := r.members(ctx, kv); lacking != "" && !o.Force {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, lacking)
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, nil)); err != nil {
		return nil, err
	}
	return r.status(ctx, "promoted: values are sealed with key "+p.ID+"; the leader rewrites the others")
}

// Finish removes the retiring keys, once no value is sealed with one and
// every voter has applied the record; and, unless forced, once compaction
// has dropped the history from before the rewrite ended.
func (r root) Finish(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	kept, removed := rotation.Finish(rec.entries())
	if len(removed) == 0 {
		return r.status(ctx, "no retiring key to remove")
	}
	if _, lacking := r.members(ctx, kv); lacking != "" && !o.Force {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, lacking)
	}
	byKey, _ := r.census()
	if why, forceable := r.finishWaits(rec, byKey); why != "" && !(forceable && o.Force) {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, why)
	}
	next := rec.withEntries(kept, nil)
	next.Rewritten = rec.Rewritten
	if err := r.s.write(ctx, kv, next); err != nil {
		return nil, err
	}
	ids := make([]string, len(removed))
	for i, e := range removed {
		ids[i] = e.ID
	}
	return r.status(ctx, fmt.Sprintf("finished: keys %v removed", ids))
}

// Abort undoes the rotation in progress: a pending key is dropped; after
// promote the previous key is active again and the rewrite moves values
// back to it.
func (r root) Abort(ctx context.Context, _ rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es, done, err := rotation.Abort(rec.entries(), r.s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, nil)); err != nil {
		return nil, err
	}
	return r.status(ctx, "aborted: "+done)
}
