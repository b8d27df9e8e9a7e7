package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/trustplane/trustplane/api/authn"
	apiauthz "github.com/trustplane/trustplane/api/authz"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
)

// bootstrapKeys are the objects a bootstrapped cluster has; a follower is
// done bootstrapping once it has applied all of them.
var bootstrapKeys = []fsm.Key{
	{Resource: "namespaces", Name: "default"},
	{Resource: "namespaces", Name: "kube-system"},
	{Resource: "namespaces", Name: "kube-public"},
	{Resource: "services", Namespace: "default", Name: "kubernetes"},
	// Written last by the RBAC bootstrap policy (api/authz).
	apiauthz.BootstrapMarker,
	// The first ServiceAccount token signing key (api/authn).
	authn.FirstKey,
}

func bootstrappedLocally(f *fsm.FSM) bool {
	for _, k := range bootstrapKeys {
		if kv, _, err := f.Get(k, 0); err != nil || kv == nil {
			return false
		}
	}
	return true
}

// bootstrap waits until the bootstrap objects exist: the leader creates the
// default namespaces and the kubernetes Service, a follower waits until it
// has applied them. It retries until ctx ends.
func bootstrap(ctx context.Context, log *slog.Logger, node *cluster.Node, f *fsm.FSM, tasks []leaderTask) error {
	for {
		if !node.IsLeader() && bootstrappedLocally(f) {
			return nil
		}
		if node.IsLeader() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			for _, task := range tasks {
				if err = task(rctx); err != nil {
					break
				}
			}
			cancel()
			if err == nil {
				return nil
			}
			log.Warn("bootstrap failed, retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rebootstrapOnLeadership runs the leader tasks again each time this node
// becomes leader, as kube-apiserver reconciles its bootstrap policy at every
// start: a leader running a newer version brings the RBAC policy and the
// default objects up to date. The tasks are idempotent and write nothing
// when all is in place. It returns when ctx ends.
func rebootstrapOnLeadership(ctx context.Context, log *slog.Logger, node *cluster.Node, tasks []leaderTask) {
	done := node.IsLeader() // the start-up bootstrap covered this term
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !node.IsLeader() {
			done = false
			continue
		}
		if done {
			continue
		}
		done = true
		for _, task := range tasks {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := task(rctx)
			cancel()
			if err != nil {
				// Try again on the next tick while this node still leads.
				log.Warn("re-running a bootstrap task as the new leader", "error", err)
				done = false
				break
			}
		}
	}
}
