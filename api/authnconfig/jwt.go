package authnconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"golang.org/x/time/rate"

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
// bounded in time and answer size, HTTPS only, redirects within the
// origin asked, and at most fetchRate requests a second (fetchTransport).
func fetchClient(caPEM string, o *Options) (*http.Client, error) {
	var roots *x509.CertPool
	if caPEM != "" {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("certificateAuthority holds no PEM certificate")
		}
	}
	tr := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	return &http.Client{
		Transport:     fetchTransport{base: tr, max: o.MaxFetchBytes, limit: rate.NewLimiter(fetchRate, fetchBurst)},
		Timeout:       o.FetchTimeout,
		CheckRedirect: sameOrigin,
	}, nil
}

// fetchRate and fetchBurst bound the requests to one issuer. A token that
// names an issuer with a key id it has not published makes the
// authenticator fetch the key set again (once the issuer's cache time has
// passed, which the issuer chooses): without a bound, anyone could make
// the node fetch as fast as it can send such tokens.
const (
	fetchRate  = 5
	fetchBurst = 20
)

// ErrNotHTTPS is a request to an issuer by another scheme than https: a
// discovery document naming an http jwks_uri, or a redirect to one, would
// leave the certificate authority configured for the issuer behind.
var ErrNotHTTPS = errors.New("issuers are fetched over https only")

// sameOrigin allows a redirect only to the scheme and host of the first
// request, and at most three: an issuer's answer may not send the node to
// another address (inside its network, say).
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 3 {
		return errors.New("stopped after 3 redirects")
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("a redirect from %s to another origin (%s://%s) is refused", first.Host, req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// fetchTransport makes every answer of an issuer safe to hand to the
// authenticator: the whole body is read first, at most max bytes
// (decompressed: Go's transport has undone any gzip); a status other than
// 200, or a body that is neither JSON nor a compact JWT (a distributed
// claim), is an error that quotes no byte of it, so that no error
// message, which TokenReview returns to its callers, carries what some
// other address answered.
type fetchTransport struct {
	base  http.RoundTripper
	max   int64
	limit *rate.Limiter
}

func (t fetchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	where := req.URL.Redacted()
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%s: %w", where, ErrNotHTTPS)
	}
	if !t.limit.Allow() {
		return nil, fmt.Errorf("%s: more than %d requests a second to this issuer; refused", where, fetchRate)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 && resp.Header.Get("Location") != "" {
		// The client follows it (sameOrigin decides); nothing to read.
		resp.Body = io.NopCloser(bytes.NewReader(nil))
		return resp, nil
	}
	if resp.StatusCode != http.StatusOK {
		// go-oidc quotes the body of any other status in its errors.
		return nil, fmt.Errorf("%s answered %s", where, resp.Status)
	}
	if t.max > 0 && resp.ContentLength > t.max {
		return nil, fmt.Errorf("%s: %w (%d bytes announced, limit %d)", where, ErrTooLarge, resp.ContentLength, t.max)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, t.max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", where, err)
	}
	if int64(len(body)) > t.max {
		return nil, fmt.Errorf("%s: %w (limit %d)", where, ErrTooLarge, t.max)
	}
	if !json.Valid(body) && !compactJWT(body) {
		return nil, fmt.Errorf("%s answered with a body that is neither JSON nor a JWT", where)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// compactJWT says whether b is three dot-separated URL-safe base64
// segments, the form of a distributed claim's answer.
func compactJWT(b []byte) bool {
	parts := strings.Split(strings.TrimSpace(string(b)), ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts[:2] {
		if _, err := base64.RawURLEncoding.DecodeString(p); err != nil || p == "" {
			return false
		}
	}
	_, err := base64.RawURLEncoding.DecodeString(parts[2])
	return err == nil
}

// JWT is the token authenticator of the federated issuers: the running
// set, replaced whole by a reload.
type JWT struct {
	cur atomic.Pointer[issuers]
}

// AuthenticateToken asks the issuers of the running configuration.
func (j *JWT) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	resp, ok, err := j.cur.Load().token.AuthenticateToken(ctx, token)
	return resp, ok, withoutAnswers(err)
}

// fetchFailures are the parts of go-oidc's and kube's errors after which
// they quote what an issuer, or an address its documents name, answered:
// go-oidc quotes a key set it cannot decode whole; a distributed claim's
// errors quote its endpoint's answer. (Its other quoting errors need a
// status other than 200, which fetchTransport turns into an error of its
// own.) The error is cut there: TokenReview returns errors to its
// callers, and an answer may be anything that address serves.
var fetchFailures = []string{"failed to decode keys", "could not expand distributed claims"}

// withoutAnswers is err cut at the first of fetchFailures.
func withoutAnswers(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, f := range fetchFailures {
		if i := strings.Index(msg, f); i >= 0 {
			return errors.New(msg[:i+len(f)] + " (the issuer's answer is not shown)")
		}
	}
	return err
}
