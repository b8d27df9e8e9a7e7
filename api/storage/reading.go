package storage

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/fsm"
)

// Writes read this node's applied state, which may trail the leader's: on
// a follower that executes writes itself (--execute-writes=local), and on
// the leader too, for a write another node had committed and answered
// before the leader applied it. A write that is proposed needs nothing
// more: the fsm judges its preconditions (the version read, its UID, that
// a created key is free) against the state at the write's own index. But
// an answer made from the state read alone - a 404, a failed precondition
// or validation, an update that changes nothing, a dry run - would be an
// answer about the past. So, as kube's GuaranteedUpdate refreshes from
// etcd before it trusts an answer made from its cache, such an answer
// stands only once a read index shows that the version it was made from
// is still the current one; otherwise the write runs again on the newer
// state (Reading.Stands).
//
// That read index is taken only on those paths: a write that succeeds
// costs the leader no confirmation round. One cheaper rule keeps a
// client's own writes in order: before a write reads, this node waits
// until it has applied every write it has answered (a follower answers a
// write once the leader committed it, maybe before applying it itself),
// so a client that updates what it just wrote, through the same node,
// reads its own write rather than meeting it as a conflict.

// Reading is one write's view of one key in this node's applied state,
// and what it knows of how current that view is.
type Reading struct {
	s   *Store
	key fsm.Key
	// current: the state read holds every write acknowledged before the
	// write began, as confirmed by a read index or by the fsm's verdict
	// on a proposal this node has since applied.
	current bool
}

// Reading starts a write's view of key.
func (s *Store) Reading(key fsm.Key) *Reading { return &Reading{s: s, key: key} }

// kv returns the stored version of the key in this node's applied state,
// or nil, once this node has applied every write it answered.
func (r *Reading) kv(ctx context.Context) (*fsm.KV, error) {
	if err := r.s.ownKey(r.key); err != nil {
		return nil, err
	}
	if err := r.s.appliedOwnWrites(ctx); err != nil {
		return nil, err
	}
	kv, _, err := r.s.backend.Get(r.key, 0)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return kv, nil
}

// Object returns the object at the key in this node's applied state, nil
// if there is none; it is shared, and must not be modified.
func (r *Reading) Object(ctx context.Context) (runtime.Object, error) {
	kv, err := r.kv(ctx)
	if err != nil || kv == nil {
		return nil, err
	}
	return r.s.DecodeShared(kv)
}

// Stands reports whether an answer made from the version rev read (0: no
// object) stands. Unless the state read is already known to be current,
// it takes a read index and reads again: the answer stands when the
// current version is still rev; otherwise the caller reads again and
// starts over. Its error is the read index's (503 without a leader).
func (r *Reading) Stands(ctx context.Context, rev uint64) (bool, error) {
	if r.current {
		return true, nil
	}
	if _, err := r.s.ReadIndex(ctx); err != nil {
		return false, err
	}
	r.current = true
	kv, _, err := r.s.backend.Get(r.key, 0)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	return modRevision(kv) == rev, nil
}

// Judged records that the fsm refused a proposal made from this reading
// for a version that is no longer current. The backend answers such a
// verdict once this node has applied the entry it was judged at, so what
// the write reads next is current.
func (r *Reading) Judged() { r.current = true }

// modRevision is the version kv stores, 0 for none.
func modRevision(kv *fsm.KV) uint64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

// answered records rev, a write this node has answered, for
// appliedOwnWrites.
func (s *Storage) answered(rev uint64) {
	for {
		cur := s.ownWrites.Load()
		if rev <= cur || s.ownWrites.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// appliedOwnWrites waits until this node has applied every write it has
// answered, within FreshWait. Should the wait end first (the node lost
// its leader after the leader committed its last write, and so never
// learnt of the commit), the write has sent nothing: it is refused with
// 503 and Retry-After, as a write that finds no leader is, never the 504
// that would call its outcome unknown.
func (s *Storage) appliedOwnWrites(ctx context.Context) error {
	rev := s.ownWrites.Load()
	if rev == 0 || s.backend.AppliedIndex() >= rev {
		return nil
	}
	if err := s.waitApplied(ctx, rev); err != nil {
		return Unavailable(fmt.Errorf("this node has not yet applied its own last write (revision %d; applied %d)", rev, s.Applied()))
	}
	return nil
}
