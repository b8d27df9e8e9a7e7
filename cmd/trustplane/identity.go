package main

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

// identity is the authentication side of a node: who a bearer token
// belongs to, and the token APIs.
type identity struct {
	// authenticator identifies bearer-token callers; nil accepts client
	// certificates only.
	authenticator authenticator.Request
	// legacyTokens signs the non-expiring tokens of kubernetes.io/service-account-token
	// Secrets (the tokens controller); nil until keys exist.
	legacyTokens serviceaccount.TokenGenerator
	// paths are extra GET handlers (OIDC discovery).
	paths map[string]http.Handler
	// bootstrap runs on the leader before the node reports ready.
	bootstrap []leaderTask
}

// setupIdentity builds the token authenticators and registers the token APIs.
func setupIdentity(w *wiring) (*identity, error) {
	return &identity{}, nil
}
