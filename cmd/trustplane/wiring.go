package main

import (
	"context"
	"log/slog"

	"github.com/trustplane/trustplane/api/caroots"
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
	// caStores are the replicated CAs the node trusts (setupCARoot), which
	// a request's catch-up settles (catchUp).
	caStores []*caroots.Store
}

// catchUp is the API's catch-up (api.Config.CatchUp): the read index wait
// (backend.catchUp), then every CA store's trust made exactly its
// record's (caroots.Store.Settle). A request that waited for it is then
// checked against the CAs the cluster trusted when it arrived, even where
// this node applied a finish while far behind and still trusts the CA it
// dropped.
func (w *wiring) catchUp(ctx context.Context) error {
	if err := w.back.catchUp(ctx); err != nil {
		return err
	}
	for _, s := range w.caStores {
		if err := s.Settle(); err != nil {
			return err
		}
	}
	return nil
}

// leaderTask is work a leader does once per term before the node reports
// ready: it must be idempotent, since every new leader runs it again.
type leaderTask func(ctx context.Context) error
