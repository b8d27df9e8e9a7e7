package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/runtime/schema"

	apiauthz "github.com/trustplane/trustplane/api/authz"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// authz is the authorisation side of a node.
type authz struct {
	// authorizer decides every request, and its escalation checks are
	// the RBAC stores' step of the admission chain.
	authorizer *apiauthz.Authorizer
	// bootstrap runs on the leader before the node reports ready.
	bootstrap []leaderTask
}

// authzResources returns the stored resources authorisation adds (RBAC).
func authzResources() []*registry.Resource { return registry.RBACResources() }

// setupAuthz builds the RBAC authorizer over this node's applied state
// (the stored RBAC objects, opened by stor).
func setupAuthz(f *fsm.FSM, stor *storage.Storage, log *slog.Logger) (*authz, error) {
	cache, err := apiauthz.NewCache(f, stor.Open, func(err error) { log.Error("rbac cache", "error", err) })
	if err != nil {
		return nil, err
	}
	return &authz{authorizer: apiauthz.New(cache)}, nil
}

// register checks that reg serves the RBAC resources the authorizer reads,
// registers the access reviews and schedules the bootstrap policy.
func (az *authz) register(reg *registry.Registry) error {
	for _, gvr := range []schema.GroupVersionResource{registry.RolesGVR, registry.ClusterRolesGVR, registry.RoleBindingsGVR, registry.ClusterRoleBindingsGVR} {
		if reg.Store(gvr) == nil {
			return fmt.Errorf("authorization: %s is not served", gvr.Resource)
		}
	}
	for _, v := range az.authorizer.Reviews() {
		reg.AddVirtual(v)
	}
	az.bootstrap = []leaderTask{func(ctx context.Context) error { return apiauthz.Bootstrap(ctx, reg) }}
	return nil
}
