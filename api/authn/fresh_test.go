package authn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	authenticationapi "k8s.io/kubernetes/pkg/apis/authentication"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
)

// TestRetiredKeyNeedsFreshState: a node that has not applied a signing
// key's retirement (cut off from the leader before it) verifies that
// key's tokens only while it is within the staleness bound. Outside it,
// the node catches up first and then refuses the token; one that cannot
// catch up answers ErrNotFresh (503), for a bearer token and for a
// TokenReview alike, instead of accepting it. A token that is not this
// cluster's (the static file's) needs no catch-up.
func TestRetiredKeyNeedsFreshState(t *testing.T) {
	ctx := context.Background()
	tokenFile := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte("static-token-1,alice,uid-alice,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, nil)
	sa := w.serviceAccount("default", "app")
	old := mint(t, w.id.Tokens, sa, nil, nil, []string{authn.DefaultIssuer}, nil)
	// A legacy token (a kubernetes.io/service-account-token Secret's) of
	// the same key: kube's validator labels its Secret when it verifies it.
	var v1sa v1.ServiceAccount
	if err := registry.Scheme.Convert(sa, &v1sa, nil); err != nil {
		t.Fatal(err)
	}
	sc, pc := serviceaccount.LegacyClaims(v1sa, v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-token", Namespace: "default"}})
	legacy, err := w.id.LegacyTokens.GenerateToken(ctx, sc, pc)
	if err != nil {
		t.Fatal(err)
	}
	w.secret("default", "app-token", api.SecretTypeServiceAccountToken,
		map[string]string{api.ServiceAccountNameKey: "app", api.ServiceAccountUIDKey: string(sa.UID)},
		map[string][]byte{api.ServiceAccountTokenKey: []byte(legacy)})
	if _, err := w.keys.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	beforeRetire := w.log.AppliedIndex()
	if _, retired, err := w.keys.Retire(ctx); err != nil || len(retired) != 1 {
		t.Fatalf("retire: %v, %v", retired, err)
	}
	if _, ok, _ := w.authenticate(old); ok {
		t.Fatal("precondition: the leader accepts a token of the retired key")
	}

	cases := []struct {
		name     string
		token    string
		fresh    bool
		cutOff   bool
		wantOK   bool
		wantErr  error // nil: any error, or none
		catchUps int
	}{
		{name: "within the bound the node's own keys answer", token: old, fresh: true, wantOK: true},
		{name: "outside the bound the node catches up and refuses", token: old, catchUps: 1},
		{name: "outside the bound and cut off: not fresh", token: old, cutOff: true, wantErr: authn.ErrNotFresh, catchUps: 1},
		{name: "a legacy token outside the bound and cut off: not fresh, and its Secret untouched", token: legacy, cutOff: true, wantErr: authn.ErrNotFresh, catchUps: 1},
		{name: "a static token needs no catch-up", token: "static-token-1", cutOff: true, wantOK: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stale := &staleLog{localLog: w.log, at: beforeRetire}
			keys := authn.NewKeyStore(stale, nil, storage.AtRest{})
			catchUps := 0
			keys.SetCatchUp(func(context.Context) error {
				catchUps++
				if tc.cutOff {
					return errors.New("no leader")
				}
				stale.caughtUp.Store(true)
				return nil
			})
			keys.SetFresh(func() bool { return tc.fresh })
			cfg := authn.DefaultConfig()
			cfg.CacheTTL = 0
			cfg.TokenFile = tokenFile
			id, err := authn.New(cfg, keys, w.reg)
			if err != nil {
				t.Fatal(err)
			}
			node := &world{t: t, log: w.log, reg: w.reg, keys: keys, id: id}
			_, ok, err := node.authenticate(tc.token)
			if ok != tc.wantOK || catchUps != tc.catchUps {
				t.Fatalf("authenticated %v after %d catch-ups (want %v after %d): %v", ok, catchUps, tc.wantOK, tc.catchUps, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && errors.Is(err, authn.ErrNotFresh) {
				t.Fatalf("error %v: refused as not fresh", err)
			}
			if got := w.getSecret("default", "app-token").Labels[serviceaccount.LastUsedLabelKey]; got != "" {
				t.Fatalf("the legacy token's Secret was labelled %q: a token the node could not verify was acted on", got)
			}

			// The same token in a TokenReview on the same node.
			stale.caughtUp.Store(false)
			catchUps = 0
			out, err := tokenReview(t, id).Create(ctx, "", &authenticationapi.TokenReview{Spec: authenticationapi.TokenReviewSpec{Token: tc.token}}, nil, &metav1.CreateOptions{})
			if tc.wantErr != nil {
				if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "has not caught up") {
					t.Fatalf("a review on a node that cannot catch up: %v", err)
				}
				if st := err.(apierrors.APIStatus).Status(); st.Details == nil || st.Details.RetryAfterSeconds != 1 {
					t.Fatalf("the refusal has no Retry-After: %+v", st)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := out.(*authenticationapi.TokenReview).Status.Authenticated; got != tc.wantOK {
				t.Fatalf("the review says authenticated %v, want %v", got, tc.wantOK)
			}
		})
	}
}

// tokenReview is id's TokenReview API.
func tokenReview(t *testing.T, id *authn.Identity) interface {
	Create(context.Context, string, runtime.Object, rest.ValidateObjectFunc, *metav1.CreateOptions) (runtime.Object, error)
} {
	t.Helper()
	for _, v := range id.Virtuals {
		if v.KindName == "TokenReview" {
			return createFunc(v.Create)
		}
	}
	t.Fatal("no TokenReview API")
	return nil
}

type createFunc func(context.Context, string, runtime.Object, rest.ValidateObjectFunc, *metav1.CreateOptions) (runtime.Object, error)

func (f createFunc) Create(ctx context.Context, name string, obj runtime.Object, v rest.ValidateObjectFunc, o *metav1.CreateOptions) (runtime.Object, error) {
	return f(ctx, name, obj, v, o)
}
