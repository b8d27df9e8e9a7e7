package encryptionkeys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/trustplane/trustplane/api/rotation"
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
			continue
		}
		if err := s.rewritePass(ctx, rc, lim); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("encryption key rewrite", "error", err)
		}
	}
}

// rewritePass is one pass of Run.
func (s *Store) rewritePass(ctx context.Context, rc RewriteConfig, lim *rate.Limiter) error {
	rec, kv, err := s.read()
	if err != nil || rec == nil {
		return err
	}
	// The file's keys rotated (kube's procedure): seal the record with
	// the file's first key, so the old one can leave the file.
	if _, stale, err := s.kek.Open(kv); err == nil && stale {
		if err := s.write(ctx, kv, rec); err != nil {
			return err
		}
		return nil
	}
	if rec.Rewritten != 0 {
		return nil
	}
	exp := rc.Export()
	// The active key of the record this pass read, whose revision the
	// compare-and-swap below checks; not the node's key set, which may
	// lag it (REDTEAM.md RT-2).
	active := FileKey
	if a := rotation.First(rec.entries(), rotation.Active); a != nil {
		active = a.ID
	}
	var todo []*fsm.KV
	remaining := 0
	exp.Live(func(kv *fsm.KV) bool {
		if id := SealedWith(kv.Value); kv.Key != recordKey && id != "" && id != active {
			remaining++
			if len(todo) < batch {
				todo = append(todo, kv)
			}
		}
		return true
	})
	if remaining == 0 {
		next := *rec
		next.Rewritten = exp.Index()
		s.setProgress(fmt.Sprintf("rewrite done at revision %d", exp.Index()))
		return s.write(ctx, kv, &next)
	}
	rewritten, unreadable := 0, 0
	var firstErr error
	for _, kv := range todo {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		if !rc.IsLeader() {
			return nil
		}
		switch err := s.rewrite(ctx, rc.AtRestOf(kv.Key), kv); {
		case err == nil:
			rewritten++
		case errors.Is(err, storage.ErrAtRest):
			// Named, never quoted; it stays, and finish waits for it.
			unreadable++
			if firstErr == nil {
				firstErr = err
			}
		default:
			return err
		}
		s.setProgress(fmt.Sprintf("rewriting: %d values left of %d at revision %d", remaining-rewritten, remaining, exp.Index()))
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
