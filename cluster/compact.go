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

// runCompactor bounds the fsm's MVCC history, as kube-apiserver's compactor
// bounds etcd's. Every node samples its applied index every CompactInterval;
// the leader proposes an OpCompact at the newest index that is at least
// CompactRetention old. Compaction goes through the log, so every node drops
// the same history at the same index and snapshots stay deterministic. The
// retention must cover the watch window and continue-token lifetime: reads
// and watches older than it get 410 Gone.
func (n *Node) runCompactor() {
	defer n.wg.Done()
	if n.cfg.CompactInterval <= 0 || n.cfg.CompactRetention <= 0 {
		return
	}
	t := time.NewTicker(n.cfg.CompactInterval)
	defer t.Stop()
	var samples []compactSample
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			samples = append(samples, compactSample{at: now, index: n.fsm.AppliedIndex()})
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
			target := samples[0].index
			if target <= n.fsm.CompactedRevision() {
				continue
			}
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
			_, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpCompact, CompactRevision: target})
			cancel()
			if err != nil {
				n.logger.Warn("compaction not proposed", "revision", target, "error", err)
				continue
			}
			n.logger.Debug("compacted history", "revision", target)
		}
	}
}
