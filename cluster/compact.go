package cluster

import (
	"context"
	"time"

	"github.com/trustplane/trustplane/fsm"
)

// compactSample is the applied index seen at a moment.
type compactSample struct {
	at    time.Time
	index uint64
}

// compactBytesCheck is how often the leader compares the fsm's history
// bytes with CompactMaxBytes (a counter read).
const compactBytesCheck = time.Second

// runCompactor bounds the fsm's MVCC history, as kube-apiserver's compactor
// bounds etcd's, by age and by size. Every node samples its applied index
// every CompactInterval; the leader proposes an OpCompact at the newest
// index that is at least CompactRetention old. Independently, when the
// history exceeds CompactMaxBytes, the leader proposes an OpCompact at the
// revision that leaves three quarters of it (fsm.CompactTargetForBytes),
// so one compaction buys room for a quarter of the bound before the next.
// On an idle cluster the leader proposes an OpNoop each interval, so that
// the newest revision handed out is superseded and expires one retention
// later (a continue token's lifetime is the retention, plus at most two
// intervals). Compaction goes through the log, so every node drops the same history at
// the same index and snapshots stay deterministic; the fsm never drops
// history by itself. The retention must cover the watch window and
// continue-token lifetime: reads and watches older than the compacted
// revision get 410 Gone.
func (n *Node) runCompactor() {
	defer n.wg.Done()
	byAge := n.cfg.CompactInterval > 0 && n.cfg.CompactRetention > 0
	bySize := n.cfg.CompactMaxBytes > 0
	if !byAge && !bySize {
		return
	}
	interval := n.cfg.CompactInterval
	if interval <= 0 {
		interval = time.Minute
	}
	ageTick := time.NewTicker(interval)
	defer ageTick.Stop()
	sizeTick := time.NewTicker(min(interval, compactBytesCheck))
	defer sizeTick.Stop()
	var samples []compactSample
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-sizeTick.C:
			if !bySize || !n.IsLeader() || n.fsm.HistoryBytes() <= n.cfg.CompactMaxBytes {
				continue
			}
			n.proposeCompaction(n.fsm.CompactTargetForBytes(n.cfg.CompactMaxBytes/4*3), "size")
		case now := <-ageTick.C:
			if !byAge {
				continue
			}
			applied := n.fsm.AppliedIndex()
			if len(samples) > 0 && applied == samples[len(samples)-1].index && n.IsLeader() {
				// Idle since the last tick: a revision handed out now
				// (a list's resourceVersion, a continue token) is the
				// newest one and no compaction can pass it until another
				// entry exists. An OpNoop supersedes it, so it expires
				// one retention from now, as kube-apiserver's compactor's
				// own write to etcd makes a token expire within two of
				// its intervals however quiet the cluster is.
				n.proposeNoop()
				applied = n.fsm.AppliedIndex()
			}
			samples = append(samples, compactSample{at: now, index: applied})
			// Keep the newest sample older than the retention, and all
			// younger ones.
			cut := now.Add(-n.cfg.CompactRetention)
			keep := 0
			for i, s := range samples {
				if s.at.Before(cut) || s.at.Equal(cut) {
					keep = i
				}
			}
			samples = samples[keep:]
			if len(samples) == 0 || samples[0].at.After(cut) || !n.IsLeader() {
				continue
			}
			n.proposeCompaction(samples[0].index, "age")
		}
	}
}

// proposeNoop moves the applied index of an idle cluster (runCompactor).
// A failure is logged: the next tick retries.
func (n *Node) proposeNoop() {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	_, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpNoop})
	cancel()
	if err != nil {
		n.logger.Warn("idle revision not advanced", "error", err)
	}
}

// proposeCompaction proposes an OpCompact at target unless the fsm has
// compacted that far already. Failures are logged: the next tick retries.
func (n *Node) proposeCompaction(target uint64, why string) {
	if target == 0 || target <= n.fsm.CompactedRevision() {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	_, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpCompact, CompactRevision: target})
	cancel()
	if err != nil {
		n.logger.Warn("compaction not proposed", "revision", target, "bound", why, "error", err)
		return
	}
	n.logger.Debug("compacted history", "revision", target, "bound", why)
}
