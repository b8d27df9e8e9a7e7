package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	apiauthz "github.com/trustplane/trustplane/api/authz"
	"github.com/trustplane/trustplane/api/registry"
)

// authz is the authorisation side of a node.
type authz struct {
	// authorizer decides every request; nil allows everything.
	authorizer authorizer.Authorizer
	// bootstrap runs on the leader before the node reports ready.
	bootstrap []leaderTask
}

// authzResources returns the stored resources authorisation adds (RBAC).
func authzResources() []*registry.Resource { return registry.RBACResources() }

// setupAuthz builds the RBAC authorizer over this node's applied state,
// attaches the escalation checks to the RBAC stores, registers the access
// reviews and schedules the bootstrap policy.
func setupAuthz(w *wiring) (*authz, error) {
	cache, err := apiauthz.NewCache(w.fsm, w.reg.Open, func(err error) { w.log.Error("rbac cache", "error", err) })
	if err != nil {
		return nil, err
	}
	a := apiauthz.New(cache)
	for gvr, admit := range map[schema.GroupVersionResource]func(context.Context, runtime.Object, runtime.Object) error{
		registry.RolesGVR:               a.AdmitRole,
		registry.ClusterRolesGVR:        a.AdmitClusterRole,
		registry.RoleBindingsGVR:        a.AdmitRoleBinding,
		registry.ClusterRoleBindingsGVR: a.AdmitClusterRoleBinding,
	} {
		st := w.reg.Store(gvr)
		if st == nil {
			return nil, fmt.Errorf("authorization: %s is not served", gvr.Resource)
		}
		st.Admit = admit
	}
	for _, v := range a.Reviews() {
		w.reg.AddVirtual(v)
	}
	return &authz{
		authorizer: a,
		bootstrap:  []leaderTask{func(ctx context.Context) error { return apiauthz.Bootstrap(ctx, w.reg) }},
	}, nil
}
