package authn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
)

// ErrNotFresh: this node's applied state may be older than the staleness
// bound (KeyStore.SetFresh) and it could not catch up with the cluster's
// leader, so it cannot tell whether a service account token it would
// accept is still valid: its signing key may have been retired, or its
// service account, pod or secret deleted, since the node last heard from
// the cluster. The API answers such a request 503 (NotFresh).
var ErrNotFresh = errors.New("this apiserver has not caught up with the cluster's leader and cannot verify service account tokens; retry against another server")

// NotFresh is the API's answer to a request that needs a service account
// token verified on a node that is not fresh (ErrNotFresh): 503 with
// Retry-After, as a resourceVersion=0 read or the JWKS there is answered,
// so that clients ask again or ask another node. It is a refusal to
// answer, not a verdict on the token: a 401 would tell the client its
// credentials are bad.
func NotFresh() *apierrors.StatusError {
	e := apierrors.NewServiceUnavailable(ErrNotFresh.Error())
	e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return e
}

// freshTokens verifies this cluster's own tokens only against state within
// the staleness bound. A node cut off from the leader keeps the keys and
// objects it applied last: without this rule it would accept a token
// whose key was retired after the cut (rotation's finish --force, the way
// to revoke a leaked key) until it heard from the leader again.
//
// While the node is fresh a token is verified as usual. Otherwise a token
// of one of issuers (read from its unverified claims, as kube's
// authenticator first does) is verified only after a catch-up, and once:
// kube's validators act on what they verify (a legacy token's Secret gets
// its last-used label), which a token the cluster has revoked must not
// cause, and they would look an unknown key id up again. A node that
// cannot catch up answers ErrNotFresh. A token of another issuer is left
// to the authenticators after this one, as inner would (its answer is
// false with no error), at no cost. kube's token cache sits above this:
// it keeps successes only, so a success cached before the node fell
// behind is reused for at most CacheTTL, as on every node.
type freshTokens struct {
	keys    *KeyStore
	issuers []string
	inner   authenticator.Token
}

func (f freshTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if f.keys.isFresh() || justCaughtUp(ctx) {
		return f.inner.AuthenticateToken(ctx, token)
	}
	if !claimsIssuer(token, f.issuers) {
		return nil, false, nil
	}
	if err := f.keys.catchUpNow(ctx); err != nil {
		// The catch-up's error (a deadline, no leader) tells the client
		// nothing it can act on beyond ErrNotFresh.
		return nil, false, ErrNotFresh
	}
	return f.inner.AuthenticateToken(WithCaughtUp(ctx), token)
}

// claimsIssuer reports whether token is a compact JWT whose unverified
// "iss" claim is one of issuers: the test kube's JWT authenticator makes
// before it verifies anything (jwtTokenAuthenticator.hasCorrectIssuer,
// unexported). Where the two could ever differ, the token is either
// caught up for in vain or refused here: never accepted unverified.
func claimsIssuer(token string, issuers []string) bool {
	if strings.HasPrefix(strings.TrimSpace(token), "{") {
		return false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		// Not verified: it only picks the tokens to catch up for.
		Issuer string `json:"iss"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return false
	}
	return slices.Contains(issuers, claims.Issuer)
}

// caughtUpKey marks a context whose verification follows a catch-up, so
// that a key id still unknown after it is not looked up again
// (publicKeys.GetPublicKeys), nor the state caught up for a second time.
type caughtUpKey struct{}

// WithCaughtUp marks ctx as a request's that has caught up with a read
// index taken after it arrived (api.Server.withCaughtUp): what would
// catch up here for it (the JWKS, a token of this cluster on a node
// outside the bound, an unknown key id) takes the state as it is. kube's
// token cache calls the token authenticators with a context of its own,
// so a bearer token it has not seen may still wait for one more round.
func WithCaughtUp(ctx context.Context) context.Context {
	return context.WithValue(ctx, caughtUpKey{}, true)
}

func justCaughtUp(ctx context.Context) bool { v, _ := ctx.Value(caughtUpKey{}).(bool); return v }
