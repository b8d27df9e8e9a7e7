package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"

	"github.com/trustplane/trustplane/api/authnconfig"
)

// authnFlags are kube-apiserver's authentication flags beyond the
// service account ones: the structured configuration file, the legacy
// --oidc-* flags it replaces, and the discovery document's jwks_uri.
type authnFlags struct {
	configFile    string
	oidc          authnconfig.OIDCFlags
	oidcAlgs      listFlag
	oidcRequired  mapFlag
	jwksURI       string
	jwksMaxAge    time.Duration
	issuerTimeout time.Duration
	issuerMax     bytesFlag
}

func (a *authnFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.configFile, "authentication-config", "", "kube's AuthenticationConfiguration file (apiserver.config.k8s.io/v1beta1 or v1alpha1): JWT issuers whose tokens authenticate (claim mappings and validation rules in CEL), and anonymous access to named paths, e.g. the OIDC discovery documents. Reloaded on change, except its anonymous section. Mutually exclusive with the --oidc-* flags")
	fs.StringVar(&a.oidc.IssuerURL, "oidc-issuer-url", "", "the URL of the OpenID issuer, https only; its JWTs authenticate (kube's legacy flag; prefer --authentication-config)")
	fs.StringVar(&a.oidc.ClientID, "oidc-client-id", "", "the audience the issuer's tokens must carry; required with --oidc-issuer-url")
	fs.StringVar(&a.oidc.CAFile, "oidc-ca-file", "", "certificate authorities the issuer's serving certificate is verified with (default: the host's roots)")
	fs.StringVar(&a.oidc.UsernameClaim, "oidc-username-claim", "sub", "the claim used as the user name")
	fs.StringVar(&a.oidc.UsernamePrefix, "oidc-username-prefix", "", "prefix of user names; empty: the issuer URL and '#' for claims other than email; '-': none")
	fs.StringVar(&a.oidc.GroupsClaim, "oidc-groups-claim", "", "the claim holding the user's groups (a string or a list)")
	fs.StringVar(&a.oidc.GroupsPrefix, "oidc-groups-prefix", "", "prefix of group names")
	fs.Var(&a.oidcAlgs, "oidc-signing-algs", "JOSE algorithms the issuer's tokens may be signed with, comma-separated (default RS256)")
	a.oidcRequired = mapFlag{}
	fs.Var(a.oidcRequired, "oidc-required-claim", "claim=value the token must carry; repeat it for more")
	fs.StringVar(&a.jwksURI, "service-account-jwks-uri", "", "the jwks_uri of the discovery document at /.well-known/openid-configuration, https: where relying parties fetch the keys when the nodes are reached through a load balancer or another name (default: https://<advertised API address>/openid/v1/jwks)")
	fs.DurationVar(&a.jwksMaxAge, "service-account-jwks-max-age", time.Hour, "how long relying parties may cache the discovery documents (their Cache-Control max-age; kube's is an hour): the longest a relying party takes to learn a new signing key, to wait between a rotation's start and promote")
	fs.DurationVar(&a.issuerTimeout, "authentication-issuer-timeout", authnconfig.DefaultFetchTimeout, "bound of every request to a JWT issuer of --authentication-config or --oidc-issuer-url (discovery document, keys, distributed claims)")
	a.issuerMax = bytesFlag(authnconfig.DefaultMaxFetchBytes)
	fs.Var(&a.issuerMax, "authentication-issuer-max-bytes", "largest answer a JWT issuer may give (discovery document, key set); longer ones fail and the issuer's tokens are refused until it answers within bounds")
}

// parsed records which --oidc-* flags fs was given (kube's FlagsSet) and
// checks the flags with kube-apiserver's messages.
func (a *authnFlags) parsed(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) { a.oidc.Set = a.oidc.Set || strings.HasPrefix(f.Name, "oidc-") })
	a.oidc.SigningAlgs = a.oidcAlgs
	if len(a.oidcRequired) > 0 {
		a.oidc.RequiredClaims = a.oidcRequired
	}
	if a.jwksURI != "" {
		u, err := url.Parse(a.jwksURI)
		if err != nil {
			return fmt.Errorf("service-account-jwks-uri must be a valid URL: %v", err)
		}
		if u.Scheme != "https" {
			return fmt.Errorf("service-account-jwks-uri requires https scheme, parsed as: %v", u.String())
		}
	}
	if a.jwksMaxAge < time.Second {
		return fmt.Errorf("--service-account-jwks-max-age %v: must be at least 1s", a.jwksMaxAge)
	}
	if a.issuerTimeout <= 0 {
		return fmt.Errorf("--authentication-issuer-timeout %v: must be positive", a.issuerTimeout)
	}
	if a.issuerMax <= 0 {
		return fmt.Errorf("--authentication-issuer-max-bytes %d: must be positive", a.issuerMax)
	}
	return nil
}

// authentication loads the configuration the flags name: the federated
// issuers, whose fetches live for the process, and the anonymous
// authenticator (nil when the file enables none). A refetch of the
// issuers' keys is repeated for refetchFor (authnconfig.Refetch).
func (a *authnFlags) authentication(issuers []string, auds authenticator.Audiences, serverID string, refetchFor time.Duration, log *slog.Logger) (*authnconfig.Authentication, authenticator.Request, error) {
	cfg, err := authnconfig.Load(context.Background(), authnconfig.Options{
		File:                  a.configFile,
		OIDC:                  a.oidc,
		ServiceAccountIssuers: issuers,
		APIAudiences:          auds,
		FetchTimeout:          a.issuerTimeout,
		MaxFetchBytes:         int64(a.issuerMax),
		ServerID:              serverID,
		RefetchFor:            refetchFor,
	}, log.With("component", "authentication-config"))
	if err != nil {
		return nil, nil, err
	}
	var anon authenticator.Request
	if cfg.Anonymous != nil && cfg.Anonymous.Enabled {
		anon = anonymous.NewAuthenticator(cfg.Anonymous.Conditions)
		if len(cfg.Anonymous.Conditions) == 0 {
			// kube's --anonymous-auth=true: legal, and easy to do by
			// mistake.
			log.Warn("--authentication-config enables anonymous requests on every path (no conditions): RBAC alone decides what system:unauthenticated may do, and any binding to that group makes its grants public")
		}
	}
	return cfg, anon, nil
}
