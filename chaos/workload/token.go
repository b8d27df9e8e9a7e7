package workload

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	mrand "math/rand"
	"strings"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/chaos/history"
)

// tokenSA is the ServiceAccount, in the run's namespace, the token client
// mints tokens for.
const tokenSA = "chaos-tokens"

// keptTokens is how many earlier tokens the client keeps reviewing.
const keptTokens = 16

// minted is a token the client holds: its id in the run and its key id.
// The token itself never goes into the history (it is a credential).
type minted struct {
	id, kid, token string
}

// tokenClient mints a ServiceAccount token every TokenInterval on a random
// node, then reviews it and one earlier token (TokenReview) on random
// nodes, and verifies the new one as a relying party does, with the JWKS
// it fetched last (fetched again on a key id it does not know). While the
// token signing key rotates, tokens of the active key must keep working on
// every node, and a token once refused must stay refused (chaos/check
// tokens).
func (w *Workload) tokenClient(ctx context.Context, id int, rng *mrand.Rand) {
	var kept []minted
	var jwks *jose.JSONWebKeySet
	for seq := 0; ctx.Err() == nil; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.TokenInterval):
		}
		t, ok := w.mint(ctx, id, seq, rng)
		if !ok {
			continue
		}
		w.review(ctx, id, t, rng)
		if len(kept) > 0 {
			w.review(ctx, id, kept[rng.Intn(len(kept))], rng)
		}
		jwks = w.verify(ctx, id, t, jwks, rng)
		kept = append(kept, t)
		if len(kept) > keptTokens {
			kept = kept[1:]
		}
	}
}

// mint requests a token on a random node, creating the ServiceAccount
// first if it is missing.
func (w *Workload) mint(ctx context.Context, id, seq int, rng *mrand.Rand) (minted, bool) {
	node := rng.Intn(len(w.clients))
	sas := w.clients[node].CoreV1().ServiceAccounts(w.cfg.Namespace)
	name := fmt.Sprintf("%s-token-%d", w.cfg.RunID, seq)
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.TokenMint, Key: name, Call: w.rec.Now()}
	rctx, cancel := w.reqCtx(ctx)
	defer cancel()
	exp := int64(3600)
	tr, err := sas.CreateToken(rctx, tokenSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		_, cerr := sas.Create(rctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tokenSA}}, metav1.CreateOptions{})
		if cerr == nil || apierrors.IsAlreadyExists(cerr) {
			tr, err = sas.CreateToken(rctx, tokenSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		}
	}
	op.Return = w.rec.Now()
	op.Outcome, op.Code, op.Reason = outcome(err)
	var t minted
	if err == nil {
		t = minted{id: name, kid: tokenKid(tr.Status.Token), token: tr.Status.Token}
		op.Read = t.kid
	}
	w.record(op)
	return t, err == nil
}

// review asks a random node whether t authenticates.
func (w *Workload) review(ctx context.Context, id int, t minted, rng *mrand.Rand) {
	node := rng.Intn(len(w.clients))
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.TokenReview, Key: t.id, Read: t.kid, Call: w.rec.Now()}
	rctx, cancel := w.reqCtx(ctx)
	defer cancel()
	tr, err := w.clients[node].AuthenticationV1().TokenReviews().Create(rctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: t.token}}, metav1.CreateOptions{})
	op.Return = w.rec.Now()
	op.Outcome, op.Code, op.Reason = outcome(err)
	if err == nil {
		op.Exists = tr.Status.Authenticated
		if !tr.Status.Authenticated {
			op.Reason = tr.Status.Error
		}
	}
	w.record(op)
}

// verify checks t's signature with jwks as a relying party does: fetched
// again from a random node when it does not hold t's key id. It returns
// the JWKS to use next.
func (w *Workload) verify(ctx context.Context, id int, t minted, jwks *jose.JSONWebKeySet, rng *mrand.Rand) *jose.JSONWebKeySet {
	node := rng.Intn(len(w.clients))
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.TokenVerify, Key: t.id, Read: t.kid, Call: w.rec.Now()}
	if jwks == nil || len(jwks.Key(t.kid)) == 0 {
		rctx, cancel := w.reqCtx(ctx)
		raw, err := w.clients[node].RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(rctx)
		cancel()
		var fresh jose.JSONWebKeySet
		if err == nil {
			err = json.Unmarshal(raw, &fresh)
		}
		if err != nil {
			op.Return = w.rec.Now()
			op.Outcome, op.Code, op.Reason = outcome(err)
			op.Outcome = history.Unknown
			w.record(op)
			return jwks
		}
		jwks = &fresh
	}
	op.Return = w.rec.Now()
	op.Outcome = history.OK
	sig, err := jose.ParseSigned(t.token)
	if err == nil {
		keys := jwks.Key(t.kid)
		err = fmt.Errorf("the JWKS holds no key %s", t.kid)
		if len(keys) > 0 {
			_, err = sig.Verify(keys[0])
		}
	}
	op.Exists = err == nil
	if err != nil {
		op.Reason = err.Error()
	}
	w.record(op)
	return jwks
}

// tokenKid is the kid of a compact JWS's header, "" when unreadable.
func tokenKid(token string) string {
	head, _, _ := strings.Cut(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(b, &h)
	return h.Kid
}
