package authn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authenticationv1beta1 "k8s.io/api/authentication/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	authenticationapi "k8s.io/kubernetes/pkg/apis/authentication"
	"k8s.io/kubernetes/pkg/registry/authentication/selfsubjectreview"
	"k8s.io/kubernetes/pkg/registry/authentication/tokenreview"
	sastorage "k8s.io/kubernetes/pkg/registry/core/serviceaccount/storage"
	"k8s.io/kubernetes/pkg/serviceaccount"

	apistorage "k8s.io/apiserver/pkg/storage"

	"github.com/trustplane/trustplane/api/registry"
)

// DefaultIssuer is the issuer kube clusters are usually set up with
// (kubeadm's default for --service-account-issuer).
const DefaultIssuer = "https://kubernetes.default.svc.cluster.local"

// DefaultCacheTTL bounds how long a positive token answer is reused: a
// token stays accepted at most this long after its pod, secret or service
// account is deleted. kube-apiserver uses 10s; shorter keeps revocation
// prompt while still absorbing repeated reviews of one token.
const DefaultCacheTTL = 3 * time.Second

// Config is what the identity side of a node is built from; cmd/ fills it
// from flags.
type Config struct {
	// Issuer is the "iss" of the tokens this cluster issues and the default
	// API audience (--service-account-issuer).
	Issuer string
	// APIAudiences are the audiences a token must carry to be accepted by
	// the API; default [Issuer], as kube-apiserver without --api-audiences.
	APIAudiences []string
	// TokenFile is kube's static token CSV (--token-auth-file); "" for none.
	TokenFile string
	// MaxTokenExpiration caps TokenRequest's expirationSeconds
	// (--service-account-max-token-expiration); 0 means no cap.
	MaxTokenExpiration time.Duration
	// ExtendExpiration is kube's --service-account-extend-token-expiration:
	// pod-bound tokens requested for exactly 3607s, the kubelet's
	// transition value, are issued for a year and warn after 3607s.
	ExtendExpiration bool
	// CacheTTL is how long a successful authentication is cached.
	CacheTTL time.Duration
	// ExternalAddress is host:port the OIDC discovery document's jwks_uri
	// points at, unless JWKSURI is set.
	ExternalAddress string
	// JWKSURI is the discovery document's jwks_uri
	// (--service-account-jwks-uri); "" for https://ExternalAddress/openid/v1/jwks.
	JWKSURI string
	// JWKSMaxAge is the Cache-Control max-age of the discovery documents
	// (--service-account-jwks-max-age): how long a relying party may keep
	// the key set, and so how long one may take to learn a new key. 0 is
	// kube's hour.
	JWKSMaxAge time.Duration
	// Federated authenticates tokens of other issuers (kube's JWT
	// authenticators, api/authnconfig); nil for none. It is asked after
	// this cluster's own tokens, as in kube-apiserver, and its answers are
	// cached with theirs.
	Federated authenticator.Token
	// KeyWait is how long a TokenRequest waits for this node to apply a
	// signing key (a cluster still bootstrapping) before answering 503.
	KeyWait time.Duration
}

// Audiences are the audiences the API accepts: APIAudiences, or the
// issuer without them (kube-apiserver without --api-audiences).
func (c *Config) Audiences() authenticator.Audiences {
	if len(c.APIAudiences) == 0 {
		return authenticator.Audiences{c.Issuer}
	}
	return authenticator.Audiences(c.APIAudiences)
}

// DefaultConfig returns kube-apiserver's defaults.
func DefaultConfig() *Config {
	return &Config{Issuer: DefaultIssuer, ExtendExpiration: true, CacheTTL: DefaultCacheTTL, KeyWait: 2 * time.Second}
}

// ValidateConfig checks c with kube-apiserver's rules and messages.
func ValidateConfig(c *Config) error {
	if c.Issuer == "" {
		return errors.New("service-account-issuer is a required flag")
	}
	if strings.Contains(c.Issuer, ":") {
		if _, err := url.Parse(c.Issuer); err != nil {
			return fmt.Errorf("service-account-issuer %q contained a ':' but was not a valid URL: %v", c.Issuer, err)
		}
	}
	if c.MaxTokenExpiration != 0 && (c.MaxTokenExpiration < time.Hour || c.MaxTokenExpiration > time.Duration(1<<32)*time.Second) {
		return errors.New("the service-account-max-token-expiration must be between 1 hour and 2^32 seconds")
	}
	if c.CacheTTL < 0 {
		return fmt.Errorf("token cache TTL %v must not be negative", c.CacheTTL)
	}
	return nil
}

// Identity is what New builds: the pieces cmd/ hands to the API server.
type Identity struct {
	// Authenticator authenticates bearer tokens (static file, bound and
	// legacy ServiceAccount JWTs); its answers include system:authenticated.
	Authenticator authenticator.Request
	// LegacyTokens signs the tokens of kubernetes.io/service-account-token
	// Secrets, with kube's legacy issuer.
	LegacyTokens serviceaccount.TokenGenerator
	// Tokens signs bound tokens with the configured issuer.
	Tokens serviceaccount.TokenGenerator
	// Virtuals are TokenRequest, TokenReview and SelfSubjectReview.
	Virtuals []*registry.Virtual
	// Paths are the OIDC discovery documents.
	Paths map[string]http.Handler
	// APIAudiences are the audiences the API accepts.
	APIAudiences authenticator.Audiences
}

// New builds the authenticator, the token generators and the token APIs
// over keys (the signing keys) and stores (the objects tokens name).
func New(cfg *Config, keys *KeyStore, stores Stores) (*Identity, error) {
	if err := ValidateConfig(cfg); err != nil {
		return nil, err
	}
	auds := cfg.Audiences()
	id := &Identity{
		APIAudiences: auds,
		Tokens:       keys.Generator(cfg.Issuer),
		LegacyTokens: keys.Generator(serviceaccount.LegacyIssuer),
	}

	tokenGetter := NewTokenGetter(stores)
	var tokens []authenticator.Token
	if cfg.TokenFile != "" {
		tf, err := tokenfile.NewCSV(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-auth-file: %w", err)
		}
		// As in kube-apiserver: a static token has no audiences of its
		// own, so it is taken for the API's (a TokenReview of one with
		// the default audiences would otherwise fail with 500).
		tokens = append(tokens, authenticator.WrapAudienceAgnosticToken(auds, tf))
	}
	// This cluster's own tokens are verified against fresh state only
	// (freshTokens): keys and the objects tokens are bound to.
	tokens = append(tokens, freshTokens{keys, []string{cfg.Issuer}, serviceaccount.JWTTokenAuthenticator([]string{cfg.Issuer}, keys.PublicKeys(), auds, serviceaccount.NewValidator(tokenGetter))})
	legacy, err := serviceaccount.NewLegacyValidator(true, tokenGetter, secretsWriter{stores})
	if err != nil {
		return nil, err
	}
	tokens = append(tokens, freshTokens{keys, []string{serviceaccount.LegacyIssuer}, serviceaccount.JWTTokenAuthenticator([]string{serviceaccount.LegacyIssuer}, keys.PublicKeys(), auds, legacy)})
	if cfg.Federated != nil {
		tokens = append(tokens, cfg.Federated)
	}
	tokenAuth := tokenunion.New(tokens...)
	if cfg.CacheTTL > 0 {
		// kube-apiserver caches successes only (failure TTL 0).
		tokenAuth = tokencache.New(tokenAuth, true, cfg.CacheTTL, 0)
	}
	id.Authenticator = withAudiences(group.NewAuthenticatedGroupAdder(bearertoken.New(tokenAuth)), auds)

	trest, err := newTokenREST(stores, id.Tokens, auds, cfg)
	if err != nil {
		return nil, err
	}
	ssr := selfsubjectreview.NewREST()
	authnV1 := authenticationv1.SchemeGroupVersion
	ssrCreate := func(ctx context.Context, _ string, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
		return ssr.Create(ctx, obj, validate, opts)
	}
	v1beta1SSR := &authenticationv1beta1.SelfSubjectReview{}
	v1beta1SSR.SetGroupVersionKind(authenticationv1beta1.SchemeGroupVersion.WithKind("SelfSubjectReview"))
	id.Virtuals = []*registry.Virtual{
		{
			GVR: serviceAccountsGVR, Subresource: "token", KindName: "TokenRequest", RequestGV: &authnV1, Namespaced: true,
			New: func() runtime.Object { return &authenticationapi.TokenRequest{} },
			Create: func(ctx context.Context, name string, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
				if err := keys.awaitKey(ctx, cfg.KeyWait); err != nil {
					return nil, err
				}
				return trest.Create(ctx, name, obj, validate, opts)
			},
		},
		{
			GVR: authnV1.WithResource("tokenreviews"), KindName: "TokenReview", Singular: "tokenreview",
			New: func() runtime.Object { return &authenticationapi.TokenReview{} },
			Create: func(ctx context.Context, _ string, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
				return reviewFresh(ctx, id.Authenticator, auds, obj, validate, opts)
			},
		},
		{
			GVR: authnV1.WithResource("selfsubjectreviews"), KindName: "SelfSubjectReview", Singular: "selfsubjectreview",
			New:    func() runtime.Object { return &authenticationapi.SelfSubjectReview{} },
			Create: ssrCreate,
		},
		{
			GVR: authenticationv1beta1.SchemeGroupVersion.WithResource("selfsubjectreviews"), KindName: "SelfSubjectReview", Singular: "selfsubjectreview",
			New:     func() runtime.Object { return &authenticationapi.SelfSubjectReview{} },
			Create:  ssrCreate,
			Warning: deprecation.WarningMessage(v1beta1SSR),
		},
	}
	id.Paths = oidcPaths(cfg, keys)
	return id, nil
}

// reviewFresh is kube's TokenReview over a, except on a node that cannot
// verify this cluster's tokens now (ErrNotFresh): kube's review would
// report that as an unauthenticated token, which a relying party takes
// for a verdict on it, so the review is refused with 503 instead. kube's
// REST gives the authenticator a request of its own, without ctx, so the
// refusal is seen on the way through; the REST is a few words, made per
// review for that.
func reviewFresh(ctx context.Context, a authenticator.Request, auds authenticator.Audiences, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	notFresh := false
	seen := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := a.AuthenticateRequest(req)
		notFresh = errors.Is(err, ErrNotFresh)
		return resp, ok, err
	})
	out, err := tokenreview.NewREST(seen, auds).Create(ctx, obj, validate, opts)
	if err == nil && notFresh {
		return nil, NotFresh()
	}
	return out, err
}

// withAudiences sets the API audiences on the request, as kube-apiserver's
// authentication filter does, so that a bearer token and a TokenReview
// with default audiences share one cache entry.
func withAudiences(a authenticator.Request, auds authenticator.Audiences) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if _, ok := authenticator.AudiencesFrom(req.Context()); !ok {
			req = req.WithContext(authenticator.WithAudiences(req.Context(), auds))
		}
		return a.AuthenticateRequest(req)
	})
}

// newTokenREST builds kube's TokenREST. kube only constructs it through the
// ServiceAccount storage, so that storage is built here over a Get-only
// adapter of the registry; the pods, secrets and nodes getters read the
// registry (nodes: NotFound while they are not served, which kube handles
// by binding the node name only).
func newTokenREST(stores Stores, gen serviceaccount.TokenGenerator, auds authenticator.Audiences, cfg *Config) (*sastorage.TokenREST, error) {
	opts := generic.RESTOptions{
		StorageConfig:  &storagebackend.ConfigForResource{GroupResource: serviceAccountsGVR.GroupResource()},
		ResourcePrefix: serviceAccountsGVR.Resource,
		Decorator: func(*storagebackend.ConfigForResource, string, func(runtime.Object) (string, error), func() runtime.Object, func() runtime.Object,
			apistorage.AttrFunc, apistorage.IndexerFuncs, *cache.Indexers) (apistorage.Interface, factory.DestroyFunc, error) {
			return getOnlyStorage{sas: getter{stores, serviceAccountsGVR}}, func() {}, nil
		},
	}
	r, err := sastorage.NewREST(opts, gen, auds, cfg.MaxTokenExpiration,
		getter{stores, podsGVR}, getter{stores, secretsGVR}, getter{stores, nodesGVR},
		cfg.ExtendExpiration, time.Duration(serviceaccount.ExpirationExtensionSeconds)*time.Second)
	if err != nil {
		return nil, fmt.Errorf("authn: token REST: %w", err)
	}
	if r.Token == nil {
		return nil, errors.New("authn: kube built no token REST")
	}
	return r.Token, nil
}
