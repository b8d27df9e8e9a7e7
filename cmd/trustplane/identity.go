package main

import (
	"k8s.io/apiserver/pkg/authentication/authenticator"
)

// identity is the authentication side of a node: who a bearer token
// belongs to, and the token APIs.
type identity struct {
	// authenticator identifies bearer-token callers; nil accepts client
	// certificates only.
	authenticator authenticator.Request
	// bootstrap runs on the leader before the node reports ready.
	bootstrap []leaderTask
}

// setupIdentity builds the token authenticators and registers the token APIs.
func setupIdentity(w *wiring) (*identity, error) {
	return &identity{}, nil
}
