package encryptionkeys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// RewriteConfig configures the leader's background rewrite (Run).
type RewriteConfig struct {
	// Export reads the whole state at one revision.
	Export func() *fsm.Export
	// AtRestOf is the transformation a stored value is sealed with
	// (storage.Storage.AtRestOf).
	AtRestOf func(fsm.Key) storage.AtRest
	// IsLeader reports whether this node leads: only the leader rewrites.
	IsLeader func() bool
	// PerSecond bounds the values rewritten per second; Burst of them may
	// go at once.
	PerSecond float64
	Burst     int
	// Interval is how often the leader looks for work; 0 is a second.
	Interval time.Duration
}

// recheck is how often the leader looks again for stale values once the
// rewrite is done (a pass opens every encrypted value): a key still
// retiring, or a file changed by kube's procedure (a node restarted with
// identity first to stop encrypting), makes values stale with no record
// changing.
const recheck = 30 * time.Second

// batch bounds the values one pass collects before rewriting them, so a
// pass holds a bounded list and looks at leadership again soon.
const batch = 1000

// Run rewrites, on the leader, every encrypted value sealed with a key
// other than the active one, until ctx ends; then it records the revision
// at which none was left (record.Rewritten). Every node runs it; on a
// follower it waits. A new leader takes over where the last one stopped,
// since each pass starts from the stored values.
func (s *Store) Run(ctx context.Context, rc RewriteConfig) {
	if s.cfg.File == nil {
		return
	}
	if rc.Interval == 0 {
		rc.Interval = time.Second
	}
	lim := rate.NewLimiter(rate.Limit(rc.PerSecond), max(rc.Burst, 1))
	tick := time.NewTicker(rc.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !rc.IsLeader() {
			s.progress.Store(nil)
			s.stale.Store(-1)
			continue
		}
		if err := s.rewritePass(ctx, rc, lim); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("encryption key rewrite", "error", err)
		}
	}
}

// rewritePass is one pass of Run: it opens every encrypted value whose
// resource is sealed at all (AtRestOf is not Identity) and rewrites, up to
// batch of them, those that are stale, that is, not sealed the way a write
// would seal them now: with the active data key, or by the file for a
// resource the file no longer encrypts (kube's procedure to stop
// encrypting works after a rotation too). A value stored in the clear is
// never touched. After the rewrite is recorded as done the leader looks
// again every recheck, and once when it starts; a stale value found then
// makes finish wait again.
func (s *Store) rewritePass(ctx context.Context, rc RewriteConfig, lim *rate.Limiter) error {
	rec, kv, err := s.read()
	if err != nil || rec == nil {
		return err
	}
	// The file's keys rotated (kube's procedure): seal the record with
	// the file's first key, so the old one can leave the file; never in
	// the clear (a file that stopped encrypting Secrets keeps the record
	// as it is, warned about once).
	sealable := s.covers(secrets, s.cfg.File.TransformerForResource(secrets))
	if _, stale, err := s.kek.Open(kv); err == nil && stale {
		if sealable {
			return s.write(ctx, kv, rec)
		}
		s.warnOnce.Do(func() {
			s.cfg.Logger.Warn("the encryption configuration no longer encrypts secrets; the data keys stay sealed by the key that sealed them, which the file must keep")
		})
	}
	if rec.Rewritten != 0 && time.Since(s.lastCheck) < recheck {
		return nil
	}
	s.lastCheck = time.Now()
	// The node's key set must be the record's, or a value sealed with the
	// key the record just retired would not look stale (docs/REDTEAM-encryption-keys.md RT-2).
	if s.current().rev < kv.ModRevision {
		if err := s.load(); err != nil || s.current().rev < kv.ModRevision {
			return err
		}
	}
	exp := rc.Export()
	var todo []*fsm.KV
	remaining, unreadable := 0, 0
	var firstErr error
	exp.Live(func(v *fsm.KV) bool {
		if v.Key == recordKey || SealedWith(v.Value) == "" {
			return true
		}
		at := rc.AtRestOf(v.Key)
		if at.Identity() {
			return true
		}
		switch _, stale, err := at.Open(v); {
		case err != nil:
			// Named, never quoted; it stays, and finish waits for it.
			unreadable++
			if firstErr == nil {
				firstErr = err
			}
		case stale:
			remaining++
			if len(todo) < batch {
				todo = append(todo, v)
			}
		}
		return true
	})
	s.stale.Store(int64(remaining + unreadable))
	if remaining == 0 && unreadable == 0 {
		if rec.Rewritten != 0 || !sealable {
			return nil
		}
		next := *rec
		next.Rewritten = exp.Index()
		s.setProgress(fmt.Sprintf("rewrite done at revision %d", exp.Index()))
		return s.write(ctx, kv, &next)
	}
	if rec.Rewritten != 0 && sealable {
		// A stale value after the rewrite was recorded done: finish waits
		// again until it is rewritten. (A file that no longer encrypts
		// Secrets cannot seal the record: the values are still rewritten.)
		next := *rec
		next.Rewritten = 0
		if err := s.write(ctx, kv, &next); err != nil {
			return err
		}
	}
	rewritten := 0
	for _, v := range todo {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		if !rc.IsLeader() {
			return nil
		}
		switch err := s.rewrite(ctx, rc.AtRestOf(v.Key), v); {
		case err == nil:
			rewritten++
		case errors.Is(err, storage.ErrAtRest):
			unreadable++
			if firstErr == nil {
				firstErr = err
			}
		default:
			return err
		}
		s.setProgress(fmt.Sprintf("rewriting: %d values left of %d at revision %d", remaining-rewritten, remaining, exp.Index()))
		s.stale.Store(int64(remaining - rewritten + unreadable))
	}
	if firstErr != nil {
		s.setProgress(fmt.Sprintf("rewriting: %d values cannot be opened (first: %v)", unreadable, firstErr))
		return firstErr
	}
	return nil
}

// rewrite seals kv's value again with the active key, unless it is not
// stale, with a compare-and-swap: a write that changed the object
// meanwhile sealed it afresh already.
func (s *Store) rewrite(ctx context.Context, at storage.AtRest, kv *fsm.KV) error {
	plain, stale, err := at.Open(kv)
	if err != nil || !stale {
		return err
	}
	val, err := at.Seal(kv.Key, plain)
	if err != nil {
		return err
	}
	_, err = s.cfg.Backend.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: kv.Key, Value: val, UID: kv.UID, ModRevision: kv.ModRevision})
	return err
}

func (s *Store) setProgress(p string) { s.progress.Store(&p) }

// ResealInternal rewrites, with a compare-and-swap each, every sealed
// internal record (the signing keys, the gossip keyring, the node CAs;
// AtRestOf not Identity) that opens stale: sealed with a key of the file
// that is no longer its first (kube's rotation of the file's keys), or
// with a data key that is no longer active. No API client can rewrite
// these records, as kube's procedure rewrites Secrets, so the leader does
// it when it starts (a bootstrap task), before the operator drops the old
// key from the file. The record of the data keys is the rewrite's own
// (rewritePass). Idempotent.
func (s *Store) ResealInternal(ctx context.Context, export func() *fsm.Export, atRestOf func(fsm.Key) storage.AtRest) error {
	if s.cfg.File == nil {
		return nil
	}
	var todo []*fsm.KV
	export().Live(func(kv *fsm.KV) bool {
		if kv.Key.Space == fsm.SpaceInternal && kv.Key != recordKey && SealedWith(kv.Value) != "" && !atRestOf(kv.Key).Identity() {
			todo = append(todo, kv)
		}
		return true
	})
	for _, kv := range todo {
		if err := s.rewrite(ctx, atRestOf(kv.Key), kv); err != nil {
			return fmt.Errorf("encryptionkeys: resealing %s %q: %w", kv.Key.Resource, kv.Key.Name, err)
		}
	}
	return nil
}
