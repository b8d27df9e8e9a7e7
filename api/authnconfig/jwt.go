package authnconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
)

// ErrTooLarge is an issuer's answer longer than Options.MaxFetchBytes.
var ErrTooLarge = errors.New("issuer response exceeds the size limit")

// issuers is one built set of JWT authenticators, the issuers of one
// version of the configuration; cancel stops their background fetches.
type issuers struct {
	token  authenticator.Token
	health func() error
	cancel context.CancelFunc
}

// buildIssuers builds kube's JWT authenticator for every issuer of cfg,
// as kube-apiserver's newJWTAuthenticator does, with a bounded client
// (fetchClient) in place of kube's. The authenticators fetch their
// discovery documents and keys in the background, under ctx.
func buildIssuers(ctx context.Context, cfg *apiserver.AuthenticationConfiguration, algs []string, o *Options) (_ *issuers, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	var tokens []authenticator.Token
	var checks []func() error
	for _, j := range cfg.JWT {
		client, err := fetchClient(j.Issuer.CertificateAuthority, o)
		if err != nil {
			return nil, fmt.Errorf("issuer %q: %w", j.Issuer.URL, err)
		}
		a, err := oidc.New(ctx, oidc.Options{
			JWTAuthenticator:     j,
			Client:               client,
			Compiler:             compiler,
			SupportedSigningAlgs: algs,
			DisallowedIssuers:    o.ServiceAccountIssuers,
		})
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, a)
		checks = append(checks, a.HealthCheck)
	}
	return &issuers{
		// kube: audience-agnostic over the API audiences, and the first
		// issuer's error ends the union (tokens name their issuer).
		token: authenticator.WrapAudienceAgnosticToken(o.APIAudiences, tokenunion.NewFailOnError(tokens...)),
		health: func() error {
			var errs []error
			for _, c := range checks {
				if err := c(); err != nil {
					errs = append(errs, err)
				}
			}
			return utilerrors.NewAggregate(errs)
		},
		cancel: cancel,
	}, nil
}

// fetchClient is the client an issuer is fetched with: the issuer's own
// certificate authority (the host's roots when none), every request
// bounded in time, every answer in size.
func fetchClient(caPEM string, o *Options) (*http.Client, error) {
	var roots *x509.CertPool
	if caPEM != "" {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("certificateAuthority holds no PEM certificate")
		}
	}
	tr := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	return &http.Client{Transport: limitedTransport{tr, o.MaxFetchBytes}, Timeout: o.FetchTimeout}, nil
}

// limitedTransport cuts every response body at max bytes: reading past it
// fails with ErrTooLarge, so neither a discovery document nor a key set
// can take the node's memory.
type limitedTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || t.max <= 0 {
		return resp, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %w (%d bytes announced, limit %d)", req.URL.Redacted(), ErrTooLarge, resp.ContentLength, t.max)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, url: req.URL.Redacted(), max: t.max}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	url  string
	max  int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%s: %w (limit %d)", b.url, ErrTooLarge, b.max)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// JWT is the token authenticator of the federated issuers: the running
// set, replaced whole by a reload.
type JWT struct {
	cur atomic.Pointer[issuers]
}

// AuthenticateToken asks the issuers of the running configuration.
func (j *JWT) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	return j.cur.Load().token.AuthenticateToken(ctx, token)
}
