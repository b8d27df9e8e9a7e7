package authnconfig

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
	"k8s.io/utils/ptr"
)

// ErrFlagsConflict is kube's refusal of --authentication-config together
// with --oidc-* flags.
var ErrFlagsConflict = errors.New("authentication-config file and oidc-* flags are mutually exclusive")

// Defaults for Options' fetch bounds. kube's client waits 30s and reads
// without bound; an issuer's discovery document and key set are a few
// kilobytes, and one that needs more than these is broken or hostile.
const (
	DefaultFetchTimeout  = 10 * time.Second
	DefaultMaxFetchBytes = 1 << 20
)

// Options is what the authentication configuration is built from; cmd/
// fills it from flags.
type Options struct {
	// File is --authentication-config; "" for none.
	File string
	// OIDC are the legacy --oidc-* flags.
	OIDC OIDCFlags
	// ServiceAccountIssuers are this cluster's own issuers, which no JWT
	// authenticator may claim (kube's rule).
	ServiceAccountIssuers []string
	// APIAudiences are the audiences the API accepts; a JWT token
	// authenticates only for requests asking for one of them.
	APIAudiences authenticator.Audiences
	// FetchTimeout bounds every request to an issuer (discovery, keys,
	// distributed claims).
	FetchTimeout time.Duration
	// MaxFetchBytes bounds every answer an issuer gives.
	MaxFetchBytes int64
	// ServerID labels the reload metrics (kube hashes its apiserver id).
	ServerID string
	// RefetchEvery and RefetchFor: after a Refetch the issuers are built
	// again every RefetchEvery until RefetchFor has passed; 0: the
	// defaults below.
	RefetchEvery, RefetchFor time.Duration
}

// The defaults of Options.RefetchEvery and RefetchFor: they cover an
// issuer that publishes this cluster's keys a minute late (a
// kube-apiserver behind trustplane's external signer fetches them every
// minute, externalsigner.DefaultRefreshHint).
const (
	DefaultRefetchEvery = 15 * time.Second
	DefaultRefetchFor   = 2 * time.Minute
)

// OIDCFlags are kube-apiserver's legacy --oidc-* flags: one issuer.
type OIDCFlags struct {
	IssuerURL, ClientID, CAFile                              string
	UsernameClaim, UsernamePrefix, GroupsClaim, GroupsPrefix string
	SigningAlgs                                              []string
	RequiredClaims                                           map[string]string
	// Set is whether any --oidc-* flag was given.
	Set bool
}

var (
	cfgScheme = runtime.NewScheme()
	codecs    = serializer.NewCodecFactory(cfgScheme, serializer.EnableStrict)
	// compiler is kube's CEL compiler for claim mappings and rules; it
	// holds a CEL environment, which is costly to build, so there is one.
	compiler = authenticationcel.NewDefaultCompiler()
)

func init() { install.Install(cfgScheme) }

// load is the configuration Options describe, validated, and the file's
// bytes ("" without a file), the signing algorithms its issuers may use.
func load(o *Options) (cfg *apiserver.AuthenticationConfiguration, data string, algs []string, err error) {
	switch {
	case o.File != "" && o.OIDC.Set:
		return nil, "", nil, ErrFlagsConflict
	case o.File != "" && !utilfeature.DefaultFeatureGate.Enabled(features.StructuredAuthenticationConfiguration):
		return nil, "", nil, fmt.Errorf("set --feature-gates=%s=true to use authentication-config file", features.StructuredAuthenticationConfiguration)
	case o.File != "":
		b, err := os.ReadFile(o.File)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--authentication-config: %w", err)
		}
		if cfg, err = decode(b); err != nil {
			return nil, "", nil, fmt.Errorf("--authentication-config %s: %w", o.File, err)
		}
		data = string(b)
		// kube: every known algorithm is allowed with the file.
		algs = oidc.AllValidSigningAlgorithms()
	case o.OIDC.Set:
		if o.OIDC.IssuerURL == "" || o.OIDC.ClientID == "" {
			return nil, "", nil, errors.New("oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set")
		}
		if cfg, err = fromFlags(&o.OIDC); err != nil {
			return nil, "", nil, err
		}
		algs = o.OIDC.SigningAlgs
	default:
		return &apiserver.AuthenticationConfiguration{}, "", nil, nil
	}
	if err := validate(cfg, o).ToAggregate(); err != nil {
		return nil, "", nil, err
	}
	return cfg, data, algs, nil
}

// decode reads an AuthenticationConfiguration as kube-apiserver does:
// strict, any served version.
func decode(data []byte) (*apiserver.AuthenticationConfiguration, error) {
	if len(data) == 0 {
		return nil, errors.New("empty config data")
	}
	obj, err := runtime.Decode(codecs.UniversalDecoder(), data)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*apiserver.AuthenticationConfiguration)
	if !ok || cfg == nil {
		return nil, fmt.Errorf("expected AuthenticationConfiguration, got %T", obj)
	}
	return cfg, nil
}

// validate is kube's validation, with this cluster's issuers disallowed.
func validate(cfg *apiserver.AuthenticationConfiguration, o *Options) field.ErrorList {
	return validation.ValidateAuthenticationConfiguration(compiler, cfg, o.ServiceAccountIssuers)
}

// fromFlags is the one issuer the --oidc-* flags describe, built as
// kube-apiserver builds it (including its username prefix rules).
func fromFlags(f *OIDCFlags) (*apiserver.AuthenticationConfiguration, error) {
	prefix := f.UsernamePrefix
	if prefix == "" && f.UsernameClaim != "email" {
		// kube's legacy behaviour (kubernetes/kubernetes#31380).
		prefix = f.IssuerURL + "#"
	}
	if prefix == "-" {
		prefix = ""
	}
	claim := f.UsernameClaim
	if claim == "" {
		claim = "sub" // the flag's default
	}
	j := apiserver.JWTAuthenticator{
		Issuer: apiserver.Issuer{URL: f.IssuerURL, Audiences: []string{f.ClientID}},
		ClaimMappings: apiserver.ClaimMappings{
			Username: apiserver.PrefixedClaimOrExpression{Prefix: ptr.To(prefix), Claim: claim},
		},
	}
	if f.GroupsClaim != "" {
		j.ClaimMappings.Groups = apiserver.PrefixedClaimOrExpression{Prefix: ptr.To(f.GroupsPrefix), Claim: f.GroupsClaim}
	}
	if f.CAFile != "" {
		b, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-file: %w", err)
		}
		j.Issuer.CertificateAuthority = string(b)
	}
	for c, v := range f.RequiredClaims {
		j.ClaimValidationRules = append(j.ClaimValidationRules, apiserver.ClaimValidationRule{Claim: c, RequiredValue: v})
	}
	return &apiserver.AuthenticationConfiguration{JWT: []apiserver.JWTAuthenticator{j}}, nil
}
