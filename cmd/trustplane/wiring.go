package main

import (
	"context"
	"log/slog"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
)

// wiring is what the identity, authorisation and controller set-up share:
// the node's parts after raft and the registry exist, before serving.
type wiring struct {
	opts  *options
	log   *slog.Logger
	ca    *certs.CA
	pki   string // <data-dir>/pki
	caDir string // the cluster CA's directory (--ca-dir, else pki)
	node  *cluster.Node
	fsm   *fsm.FSM
	reg   *registry.Registry
	back  backend
}

// leaderTask is work a leader does once per term before the node reports
// ready: it must be idempotent, since every new leader runs it again.
type leaderTask func(ctx context.Context) error
