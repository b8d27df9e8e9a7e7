package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/trustplane/trustplane/fsm"
)

// Durable removal. RemoveMember (the operator's `trustplane members
// remove`) first writes a marker through the log under removedPrefix, then
// removes the server from raft's configuration. Every later leader sees the
// marker in its fsm before it reconciles (reconcile waits for the term
// barrier), so no leader re-adds the node because gossip still shows it
// alive, or because it was restarted with the same name and data dir.
//
// The marker is cleared by one rule only: the node comes back with an
// empty data directory (it answers HasState false). Wiping the data dir is
// a deliberate operator act, and a node without raft state carries no
// stale log or configuration, so it joins like a new server. A graceful
// Leave (SIGTERM with --leave-on-terminate) writes no marker: a node that
// left and restarts rejoins, as in Consul.

// removedPrefix is where the markers live: one key per removed name, in
// the internal key space (fsm.Space), which no store of the API can reach,
// so no API request can read, write or watch it (the signing keys of
// api/authn live there too).
var removedPrefix = fsm.Prefix{Space: fsm.SpaceInternal, Resource: "removedmembers"}

func removedKey(name string) fsm.Key {
	return fsm.Key{Space: removedPrefix.Space, Resource: removedPrefix.Resource, Name: name}
}

// isRemoved reports whether this node has applied a removal marker for
// name. Only meaningful on a read-ready leader (everything committed has
// applied).
func (n *Node) isRemoved(name string) bool {
	kv, _, err := n.fsm.Get(removedKey(name), 0)
	return err == nil && kv != nil
}

// markRemoved writes the removal marker for name (leader only).
func (n *Node) markRemoved(ctx context.Context, name string) error {
	if n.isRemoved(name) {
		return nil
	}
	if _, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: removedKey(name), Value: []byte(name), UID: "removed-member/" + name}); err != nil {
		return fmt.Errorf("record the removal of %q: %w", name, err)
	}
	return nil
}

// clearRemoved deletes the removal marker for name (leader only).
func (n *Node) clearRemoved(ctx context.Context, name string) error {
	res, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpDelete, Key: removedKey(name)})
	if err != nil {
		return fmt.Errorf("clear the removal marker of %q: %w", name, err)
	}
	if res.Err != nil && !errors.Is(res.Err, fsm.ErrNotFound) {
		return fmt.Errorf("clear the removal marker of %q: %w", name, res.Err)
	}
	return nil
}

// readmitRemoved decides whether a removed member that gossip shows alive
// may be added again: only when it has no raft state (a wiped data dir),
// in which case its marker is cleared first. Otherwise it says why not.
func (n *Node) readmitRemoved(name string, resp *rpcResponse) error {
	if resp.HasState {
		return fmt.Errorf("not re-adding %q: an operator removed it (trustplane members remove) and it still has its old raft state; to bring it back, stop it, empty its data directory and start it again", name)
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if err := n.clearRemoved(ctx, name); err != nil {
		return err
	}
	n.logger.Info("a removed member came back with an empty data directory; its removal marker is cleared and it joins as a new server", "member", name)
	return nil
}
