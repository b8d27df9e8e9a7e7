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
// has applied them. It retries until ctx ends. It returns the raft term in
// which it ran the leader tasks, 0 when it returned as a follower: that term
// is served, and rebootstrapOnLeadership serves every later one.
func bootstrap(ctx context.Context, log *slog.Logger, node *cluster.Node, f *fsm.FSM, tasks []leaderTask) (uint64, error) {
	for {
		term, leader := node.LeaderTerm()
		// A follower is done once it has applied the objects; a node that
		// knows no leader yet waits, since it may be about to lead (a
		// restarted single node) and then owes the leader tasks.
		if other, _ := node.Leader(); !leader && other != "" && bootstrappedLocally(f) {
			return 0, nil
		}
		if leader {
			err := runLeaderTasks(ctx, tasks)
			if err == nil {
				return term, nil
			}
			log.Warn("bootstrap failed, retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runLeaderTasks runs tasks in order, each bounded, until one fails.
func runLeaderTasks(ctx context.Context, tasks []leaderTask) error {
	for _, task := range tasks {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := task(rctx)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// rebootstrapOnLeadership runs the leader tasks again in every raft term
// in which this node leads, after served (the term bootstrap ran them in;
// 0: none), as kube-apiserver reconciles its bootstrap policy at every
// start: a leader running a newer version brings the RBAC policy and the
// default objects up to date, and re-encrypts the signing keys stored with
// a key that is no longer first. Terms, not leadership flips, decide: a
// node that started as a follower and was elected before this loop first
// looked still runs them (a start-up race that once skipped the
// re-encryption). The tasks are idempotent and write nothing when all is in
// place. It returns when ctx ends.
func rebootstrapOnLeadership(ctx context.Context, log *slog.Logger, node *cluster.Node, tasks []leaderTask, served uint64) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		term, leader := node.LeaderTerm()
		if !leader || term == served {
			continue
		}
		if err := runLeaderTasks(ctx, tasks); err != nil {
			// Try again on the next tick while this node still leads.
			log.Warn("re-running a bootstrap task as the new leader", "error", err)
			continue
		}
		served = term
	}
}
