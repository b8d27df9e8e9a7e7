package main

import (
	"encoding/json"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/authnconfig"
)

// identity is the authentication side of a node: who a bearer token
// belongs to, and the token APIs.
type identity struct {
	// authenticator identifies bearer-token callers; nil accepts client
	// certificates only.
	authenticator authenticator.Request
	// legacyTokens signs the non-expiring tokens of kubernetes.io/service-account-token
	// Secrets (the tokens controller) with the current key; it fails with
	// authn.ErrNoSigningKey until this node has applied a key.
	legacyTokens serviceaccount.TokenGenerator
	// issuers are the cluster's own token issuers.
	issuers []string
	// anonymous is the anonymous authenticator of --authentication-config;
	// nil when it enables none.
	anonymous authenticator.Request
	// authConfig reloads --authentication-config (authConfig.Run).
	authConfig *authnconfig.Authentication
	// paths are extra GET handlers (OIDC discovery).
	paths map[string]http.Handler
	// actions are operator POST handlers (signing-key rotation and
	// retirement).
	actions map[string]http.Handler
	// bootstrap runs on the leader before the node reports ready.
	bootstrap []leaderTask
	// keys are the replicated token signing keys (rotation: keys.Rotate on
	// the leader).
	keys *authn.KeyStore
}

// setupIdentity builds the token authenticators and registers the token APIs.
func setupIdentity(w *wiring) (*identity, error) {
	cfg := authn.DefaultConfig()
	if w.opts.saIssuer != "" {
		cfg.Issuer = w.opts.saIssuer
	}
	cfg.TokenFile = w.opts.tokenAuthFile
	cfg.MaxTokenExpiration = w.opts.saMaxTokenExpiration
	cfg.ExtendExpiration = w.opts.saExtendTokenExpiration
	cfg.ExternalAddress = w.opts.addrs.api
	cfg.JWKSURI = w.opts.authn.jwksURI
	cfg.JWKSMaxAge = w.opts.authn.jwksMaxAge
	// The federated issuers' keys are fetched again after a key change
	// until an issuer fetching this cluster's keys a minute late, from a
	// node that trails by up to the staleness bound, has them.
	refetchFor := authnconfig.DefaultRefetchFor + max(w.opts.maxStaleRead, 0)
	authConfig, anon, err := w.opts.authn.authentication([]string{cfg.Issuer}, cfg.Audiences(), w.opts.nodeName, refetchFor, w.log)
	if err != nil {
		return nil, err
	}
	cfg.Federated = authConfig.Token
	// The signing keys are secret material: the encryption configuration
	// for secrets encrypts them too (docs/COMPATIBILITY.md).
	keys := authn.NewKeyStore(w.back, w.fsm, w.reg.InternalAtRest())
	keys.SetTokenLifetime(cfg.MaxTokenExpiration, cfg.ExtendExpiration)
	keys.SetMembers(membership{node: w.node}.appliedIndexes)
	keys.SetCatchUp(w.back.catchUp)
	keys.SetFresh(func() bool { return api.LocalStateFresh(membership{node: w.node}, w.opts.maxStaleRead) })
	// A federated issuer may publish this cluster's own keys (the fleet
	// set-up): go-oidc would keep a key retired here until restart.
	keys.PublicKeys().AddListener(refetchOnKeyChange{authConfig})
	id, err := authn.New(cfg, keys, w.reg)
	if err != nil {
		return nil, err
	}
	for _, v := range id.Virtuals {
		w.reg.AddVirtual(v)
	}
	actions := map[string]http.Handler{rotatePath: rotateHandler(keys), retirePath: retireHandler(keys)}
	return &identity{
		authenticator: id.Authenticator,
		anonymous:     anon,
		issuers:       []string{cfg.Issuer},
		authConfig:    authConfig,
		legacyTokens:  id.LegacyTokens,
		paths:         id.Paths,
		actions:       actions,
		bootstrap:     []leaderTask{keys.EnsureKey, keys.Reencrypt},
		keys:          keys,
	}, nil
}

// refetchOnKeyChange fetches the federated issuers' keys again whenever
// this node's signing keys change (authnconfig.Authentication.Refetch).
type refetchOnKeyChange struct{ a *authnconfig.Authentication }

func (r refetchOnKeyChange) Enqueue() { r.a.Refetch() }

// rotatePath rotates the token signing key at once (rotation's start and
// promote, forced; trustplane rotate signing-key takes them one at a
// time): POST, system:masters only, served by the leader (e.g. kubectl
// create --raw <path> -f /dev/null).
const rotatePath = "/debug/trustplane/signing-keys/rotate"

// rotateHandler writes a new signing key through Raft and answers with its
// key id. Tokens signed by older keys keep verifying.
func rotateHandler(keys *authn.KeyStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		kid, err := keys.Rotate(req.Context())
		if err != nil {
			http.Error(w, "rotating the signing key failed: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"kid": kid})
	})
}

// retirePath retires every retiring signing key at once (rotation's
// finish, forced): POST, system:masters only, served by the leader. Tokens the retired keys
// signed stop verifying on every node.
const retirePath = "/debug/trustplane/signing-keys/retire"

// retireHandler replaces the older keys with tombstones through Raft and
// answers with the current key id and the retired ones.
func retireHandler(keys *authn.KeyStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		kid, retired, err := keys.Retire(req.Context())
		if err != nil {
			http.Error(w, "retiring the old signing keys failed: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"kid": kid, "retired": append([]string{}, retired...)})
	})
}
