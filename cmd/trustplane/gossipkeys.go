package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"

	"github.com/trustplane/trustplane/api/gossipkeys"
)

// gossipKeyringFile is the node's copy of the gossip keyring it last
// applied, in its data directory (api/gossipkeys Local).
const gossipKeyringFile = "gossip-keyring.json"

// gossipKeysAtStart are the keys gossip starts with: the keyring this node
// last applied, when it has one (the replicated set is the truth once
// seeded), else <ca-dir>/gossip.key alone, which seeds the set.
func gossipKeysAtStart(log *slog.Logger, caDir, dataDir string) (primary []byte, more [][]byte, err error) {
	file, err := readGossipKey(caDir)
	if err != nil {
		return nil, nil, err
	}
	local, ok, err := gossipkeys.LoadLocal(filepath.Join(dataDir, gossipKeyringFile))
	if err != nil || !ok {
		return file, nil, err
	}
	known := false
	for _, k := range local.Trusted {
		known = known || bytes.Equal(k, file)
	}
	if !known {
		log.Warn("gossip.key is no longer in the cluster's gossip keyring; nodes that join with it cannot gossip: put the active key in it (trustplane rotate gossip-key)",
			"file", filepath.Join(caDir, gossipKeyFile))
	}
	return local.Primary, local.Trusted, nil
}

// setupGossipKeys builds the replicated gossip keyring of a multi-node
// cluster (api/gossipkeys), sealed at rest as Secrets are, following the
// applied stream into the node's memberlist keyring.
func setupGossipKeys(w *wiring) *gossipkeys.Store {
	gk := gossipkeys.New(gossipkeys.Config{
		Backend: w.back,
		AtRest:  w.reg.InternalAtRest(),
		Keyring: w.node,
		Members: membership{node: w.node}.appliedIndexes,
		Path:    filepath.Join(w.opts.dataDir, gossipKeyringFile),
		CaughtUp: func() bool {
			return w.node.CheckCaughtUp() == nil
		},
		Logger: w.log.With("component", "gossip-keys"),
	})
	w.fsm.Subscribe(gk)
	return gk
}

// seedGossipKeys is the leader task that seeds the replicated keyring with
// the key gossip runs with.
func seedGossipKeys(gk *gossipkeys.Store, key []byte) leaderTask {
	return func(ctx context.Context) error { return gk.Seed(ctx, key) }
}
