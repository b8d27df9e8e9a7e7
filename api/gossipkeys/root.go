package gossipkeys

import (
	"context"
	"fmt"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/fsm"
)

// Root is the gossip key as a rotation root.
func (s *Store) Root() rotation.Root { return root{s} }

type root struct{ s *Store }

// load reads the record a step starts from; a keyring not seeded yet
// refuses every step.
func (r root) load() (*record, *fsm.KV, error) {
	rec, kv, err := r.s.read()
	if err == nil && rec == nil {
		err = fmt.Errorf("%w: the gossip keyring is not seeded yet (the leader seeds it at start)", rotation.ErrNotReady)
	}
	return rec, kv, err
}

// members is every member's view of the keyring (rotation.Members):
// whether it has applied the record the leader holds.
func (s *Store) members(ctx context.Context) ([]rotation.Member, string) {
	_, kv, err := s.read()
	if err != nil || kv == nil {
		return nil, ""
	}
	return rotation.Members(ctx, s.cfg.Members, kv.ModRevision, "the gossip keyring")
}

func (r root) status(ctx context.Context, done string) (*rotation.Status, error) {
	rec, _, err := r.load()
	if err != nil {
		return nil, err
	}
	es := rec.entries()
	st := &rotation.Status{Root: Root, Keys: rotation.Keys(es), Done: done}
	var lacking string
	st.Members, lacking = r.s.members(ctx)
	switch {
	case rotation.First(es, rotation.Pending) != nil:
		st.Next, st.Waiting = rotation.StepPromote, lacking
	case rotation.First(es, rotation.Retiring) != nil:
		st.Next, st.Waiting = rotation.StepFinish, lacking
	}
	return st, nil
}

// Status reports each key's phase (by id, never its bytes), the members'
// view and the next step.
func (r root) Status(ctx context.Context) (*rotation.Status, error) { return r.status(ctx, "") }

// Start adds a pending key (the operator's, or a new one): every node
// decrypts with it once applied, none encrypts with it yet.
func (r root) Start(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	key := o.Key
	if key == nil {
		if key, err = newKey(); err != nil {
			return nil, err
		}
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%w: a gossip key is 32 bytes (AES-256), got %d", rotation.ErrNotReady, len(key))
	}
	id := keyID(key)
	es, err := rotation.AddPending(rec.entries(), id, r.s.cfg.Now().Unix())
	if err != nil {
		if p := rotation.First(rec.entries(), rotation.Pending); p != nil && p.ID == id {
			return r.status(ctx, "key "+id+" is pending already")
		}
		return nil, err
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, map[string][]byte{id: key})); err != nil {
		return nil, err
	}
	return r.status(ctx, "started: key "+id+" is pending")
}

// Promote makes every node encrypt with the pending key, once every member
// decrypts with it (unless forced): no node ever sends what a peer cannot
// read, so membership does not flap.
func (r root) Promote(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es, p, err := rotation.Promote(rec.entries(), r.s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if _, lacking := r.s.members(ctx); lacking != "" && !o.Force {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, lacking)
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, nil)); err != nil {
		return nil, err
	}
	return r.status(ctx, "promoted: gossip is encrypted with key "+p.ID)
}

// Finish removes the retiring key, once every member encrypts with the
// active one (unless forced): after it, a node or a stranger with only the
// old key can no longer join or read gossip.
func (r root) Finish(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	kept, removed := rotation.Finish(rec.entries())
	if len(removed) == 0 {
		return r.status(ctx, "no retiring key to remove")
	}
	if _, lacking := r.s.members(ctx); lacking != "" && !o.Force {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, lacking)
	}
	if err := r.s.write(ctx, kv, rec.withEntries(kept, nil)); err != nil {
		return nil, err
	}
	ids := make([]string, len(removed))
	for i, e := range removed {
		ids[i] = e.ID
	}
	return r.status(ctx, fmt.Sprintf("finished: keys %v removed", ids))
}

// Abort undoes the rotation in progress.
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

// PhaseCounts counts this node's gossip keys by phase, as it has applied
// them (trustplane_trust_root_keys).
func (s *Store) PhaseCounts() (map[rotation.Phase]int, error) {
	rec, _, err := s.read()
	if err != nil {
		return nil, err
	}
	out := map[rotation.Phase]int{rotation.Pending: 0, rotation.Active: 0, rotation.Retiring: 0}
	if rec != nil {
		for _, e := range rec.Keys {
			out[e.Phase]++
		}
	}
	return out, nil
}
