package authn

import (
	"context"
	"errors"

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
// The token is first verified as usual, so that a token of another issuer
// (inner answers false with no error) costs nothing more. An answer about
// one of this issuer's tokens stands while the node is fresh; otherwise
// it is given only after a catch-up (shared by concurrent callers, as the
// JWKS's), by verifying again, and a node that cannot catch up answers
// ErrNotFresh. kube's token cache sits above this, so a success cached
// before the node fell behind is still reused for at most CacheTTL, as
// every node reuses one.
type freshTokens struct {
	keys  *KeyStore
	inner authenticator.Token
}

func (f freshTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	resp, ok, err := f.inner.AuthenticateToken(ctx, token)
	if !ok && err == nil {
		return resp, ok, err // not a token of this issuer
	}
	if f.keys.localFresh == nil || f.keys.localFresh() {
		return resp, ok, err
	}
	if cerr := f.keys.sharedCatchUp(ctx); cerr != nil {
		// The catch-up's error (a deadline, no leader) tells the client
		// nothing it can act on beyond ErrNotFresh.
		return nil, false, ErrNotFresh
	}
	return f.inner.AuthenticateToken(context.WithValue(ctx, caughtUpKey{}, true), token)
}

// caughtUpKey marks a context whose verification follows a catch-up, so
// that a key id still unknown after it is not looked up again
// (publicKeys.GetPublicKeys).
type caughtUpKey struct{}

func justCaughtUp(ctx context.Context) bool { v, _ := ctx.Value(caughtUpKey{}).(bool); return v }
