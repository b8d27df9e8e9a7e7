package authn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
)

// pod stores a minimal defaulted pod running as sa.
func (w *world) pod(ns, name, sa string) *api.Pod {
	w.t.Helper()
	ext := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.PodSpec{ServiceAccountName: sa, Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}
	registry.Scheme.Default(ext)
	in := &api.Pod{}
	if err := registry.Scheme.Convert(ext, in, nil); err != nil {
		w.t.Fatal(err)
	}
	return w.create(ns, in).(*api.Pod)
}

func (w *world) secret(ns, name string, typ api.SecretType, annotations map[string]string, data map[string][]byte) *api.Secret {
	return w.create(ns, &api.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Type: typ, Data: data}).(*api.Secret)
}

// mint signs a bound token the way TokenRequest does, then lets edit change
// the public claims (times, issuer) before signing.
func mint(t testing.TB, gen serviceaccount.TokenGenerator, sa *api.ServiceAccount, pod *api.Pod, secret *api.Secret, auds []string, edit func(*jwt.Claims)) string {
	t.Helper()
	sc, pc, err := serviceaccount.Claims(*sa, pod, secret, nil, 3600, 0, auds)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(sc)
	}
	tok, err := gen.GenerateToken(context.Background(), sc, pc)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func at(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(time.Now().Add(d)) }

// TestBearerTokens runs kube's validators over tokens signed with this
// node's replicated key: each case is one rule a token must pass.
func TestBearerTokens(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte("static-token-1,alice,uid-alice,\"team-a,team-b\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, func(c *authn.Config) { c.TokenFile = tokenFile })
	auds := []string{authn.DefaultIssuer}
	gen := w.id.Tokens

	sa := w.serviceAccount("default", "app")
	gone := w.serviceAccount("default", "gone")
	goneTok := mint(t, gen, gone, nil, nil, auds, nil)
	w.delete("default", "serviceaccounts", "gone")
	again := w.serviceAccount("default", "again")
	againTok := mint(t, gen, again, nil, nil, auds, nil)
	w.delete("default", "serviceaccounts", "again")
	w.serviceAccount("default", "again")

	p := w.pod("default", "web", "app")
	podTok := mint(t, gen, sa, p, nil, auds, nil)
	deletedPod := w.pod("default", "deleted", "app")
	deletedPodTok := mint(t, gen, sa, deletedPod, nil, auds, nil)
	w.delete("default", "pods", "deleted")
	recreated := w.pod("default", "recreated", "app")
	recreatedTok := mint(t, gen, sa, recreated, nil, auds, nil)
	w.delete("default", "pods", "recreated")
	w.pod("default", "recreated", "app")
	sec := w.secret("default", "bound", api.SecretTypeOpaque, nil, nil)
	secretTok := mint(t, gen, sa, nil, sec, auds, nil)
	goneSec := w.secret("default", "bound-gone", api.SecretTypeOpaque, nil, nil)
	goneSecretTok := mint(t, gen, sa, nil, goneSec, auds, nil)
	w.delete("default", "secrets", "bound-gone")

	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := serviceaccount.JWTTokenGenerator(authn.DefaultIssuer, other)
	if err != nil {
		t.Fatal(err)
	}
	valid := mint(t, gen, sa, nil, nil, auds, nil)

	// legacy: a kubernetes.io/service-account-token Secret's token.
	var v1sa v1.ServiceAccount
	if err := registry.Scheme.Convert(sa, &v1sa, nil); err != nil {
		t.Fatal(err)
	}
	legacyFor := func(name string) string {
		sc, pc := serviceaccount.LegacyClaims(v1sa, v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
		tok, err := w.id.LegacyTokens.GenerateToken(context.Background(), sc, pc)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	legacyTok := legacyFor("app-token")
	w.secret("default", "app-token", api.SecretTypeServiceAccountToken,
		map[string]string{api.ServiceAccountNameKey: "app", api.ServiceAccountUIDKey: string(sa.UID)},
		map[string][]byte{api.ServiceAccountTokenKey: []byte(legacyTok)})
	legacyGoneTok := legacyFor("app-token-gone")
	w.secret("default", "app-token-gone", api.SecretTypeServiceAccountToken,
		map[string]string{api.ServiceAccountNameKey: "app", api.ServiceAccountUIDKey: string(sa.UID)},
		map[string][]byte{api.ServiceAccountTokenKey: []byte(legacyGoneTok)})
	w.delete("default", "secrets", "app-token-gone")

	tamper := func(tok string) string {
		parts := strings.Split(tok, ".")
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		sig[len(sig)/2] ^= 0x01
		parts[2] = base64.RawURLEncoding.EncodeToString(sig)
		return strings.Join(parts, ".")
	}
	swapPayload := func(tok, from string) string {
		parts, donor := strings.Split(tok, "."), strings.Split(from, ".")
		parts[1] = donor[1]
		return strings.Join(parts, ".")
	}
	foreign := mint(t, forger, sa, nil, nil, auds, nil)

	cases := []struct {
		name    string
		token   string
		auds    []string
		user    string
		extra   map[string]string
		wantErr string // substring; "" with user=="" means rejected without a reason
	}{
		{name: "a bound token of a live service account is accepted", token: valid, user: "system:serviceaccount:default:app"},
		{name: "a pod-bound token carries the pod in extra", token: podTok, user: "system:serviceaccount:default:app",
			extra: map[string]string{"authentication.kubernetes.io/pod-name": "web", "authentication.kubernetes.io/pod-uid": string(p.UID)}},
		{name: "a secret-bound token of a live secret is accepted", token: secretTok, user: "system:serviceaccount:default:app"},
		{name: "an expired token is rejected", token: mint(t, gen, sa, nil, nil, auds, func(c *jwt.Claims) {
			c.IssuedAt, c.NotBefore, c.Expiry = at(-2*time.Hour), at(-2*time.Hour), at(-time.Hour)
		}), wantErr: "service account token has expired"},
		{name: "a token not valid yet is rejected", token: mint(t, gen, sa, nil, nil, auds, func(c *jwt.Claims) {
			c.NotBefore, c.Expiry = at(time.Hour), at(2*time.Hour)
		}), wantErr: "service account token is not valid yet"},
		{name: "a token issued in the future is rejected", token: mint(t, gen, sa, nil, nil, auds, func(c *jwt.Claims) {
			c.IssuedAt, c.Expiry = at(time.Hour), at(2*time.Hour)
		}), wantErr: "service account token is issued in the future"},
		{name: "a token from another issuer is not ours", token: mint(t, w.keys.Generator("https://elsewhere.example"), sa, nil, nil, auds, nil), wantErr: "invalid bearer token"},
		{name: "a token signed by another key is rejected", token: foreign, wantErr: "invalid signature, no keys found"},
		{name: "a tampered signature is rejected", token: tamper(valid), wantErr: "error in cryptographic primitive"},
		{name: "a payload swapped under our signature is rejected", token: swapPayload(valid, podTok), wantErr: "error in cryptographic primitive"},
		{name: "a token for another audience is not accepted by the API", token: mint(t, gen, sa, nil, nil, []string{"vault"}, nil), wantErr: "is invalid for the target audiences"},
		{name: "audiences intersect with the requested ones", token: mint(t, gen, sa, nil, nil, []string{"vault", "db"}, nil), auds: []string{"db", "x"}, user: "system:serviceaccount:default:app"},
		{name: "a token of a deleted service account is rejected", token: goneTok, wantErr: `serviceaccounts "gone" not found`},
		{name: "a token of a recreated service account is rejected", token: againTok, wantErr: "service account UID ("},
		{name: "a token of a deleted pod is rejected", token: deletedPodTok, wantErr: "service account token has been invalidated"},
		{name: "a token of a recreated pod is rejected", token: recreatedTok, wantErr: "does not match service account pod ref claim"},
		{name: "a token of a deleted secret is rejected", token: goneSecretTok, wantErr: "service account token has been invalidated"},
		{name: "a legacy secret token is accepted", token: legacyTok, user: "system:serviceaccount:default:app"},
		{name: "a legacy token whose secret is gone is rejected", token: legacyGoneTok, wantErr: "Token has been invalidated"},
		{name: "a static token file user is accepted", token: "static-token-1", user: "alice"},
		{name: "garbage is rejected", token: "not-a-token", wantErr: "invalid bearer token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, ok, err := w.authenticate(tc.token, tc.auds...)
			if tc.user == "" {
				if ok || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ok=%v err=%v, want rejected with %q", ok, err, tc.wantErr)
				}
				return
			}
			if !ok || err != nil {
				t.Fatalf("ok=%v err=%v, want %s", ok, err, tc.user)
			}
			if got := resp.User.GetName(); got != tc.user {
				t.Fatalf("user %q, want %q", got, tc.user)
			}
			if !slices.Contains(resp.User.GetGroups(), "system:authenticated") {
				t.Fatalf("groups %v lack system:authenticated", resp.User.GetGroups())
			}
			for k, v := range tc.extra {
				if got := resp.User.GetExtra()[k]; len(got) != 1 || got[0] != v {
					t.Fatalf("extra %s = %v, want [%s]", k, got, v)
				}
			}
		})
	}

	// kube's legacy validator labels the Secret it accepted a token of.
	obj, err := w.reg.Store(schemaSecrets).Get(nsCtx("default"), "app-token", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := obj.(*api.Secret).Labels[serviceaccount.LastUsedLabelKey]; !ok {
		t.Fatalf("secret labels %v lack %s", obj.(*api.Secret).Labels, serviceaccount.LastUsedLabelKey)
	}
}

var schemaSecrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// TestStaticTokenGroups: the token file's groups are the user's, as kube.
func TestStaticTokenGroups(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(f, []byte("tok,bob,uid-bob,\"g1,g2\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, func(c *authn.Config) { c.TokenFile = f })
	resp, ok, err := w.authenticate("tok")
	if !ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if got, want := resp.User.GetGroups(), []string{"g1", "g2", "system:authenticated"}; !slices.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if resp.User.GetUID() != "uid-bob" {
		t.Fatalf("uid %q", resp.User.GetUID())
	}
}

// TestCachedAnswerEndsWithTTL: a cached positive answer stops being used
// once CacheTTL has passed after the bound pod is deleted.
func TestCachedAnswerEndsWithTTL(t *testing.T) {
	w := newWorld(t, func(c *authn.Config) { c.CacheTTL = 200 * time.Millisecond })
	sa := w.serviceAccount("default", "app")
	p := w.pod("default", "web", "app")
	tok := mint(t, w.id.Tokens, sa, p, nil, []string{authn.DefaultIssuer}, nil)
	if _, ok, err := w.authenticate(tok); !ok {
		t.Fatalf("fresh token rejected: %v", err)
	}
	w.delete("default", "pods", "web")
	// Poll: the answer must turn within a bounded number of TTLs.
	for i := 0; ; i++ {
		_, ok, err := w.authenticate(tok)
		if !ok {
			if err == nil || !strings.Contains(err.Error(), "invalidated") {
				t.Fatalf("rejected with %v, want invalidated", err)
			}
			return
		}
		if i > 100 {
			t.Fatal("token of a deleted pod still accepted after 100 cache lifetimes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestValidateConfig(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*authn.Config)
		wantErr string
	}{
		{name: "defaults are valid", mutate: func(*authn.Config) {}},
		{name: "an issuer is required", mutate: func(c *authn.Config) { c.Issuer = "" }, wantErr: "service-account-issuer is a required flag"},
		{name: "a max expiration under an hour is refused", mutate: func(c *authn.Config) { c.MaxTokenExpiration = 59 * time.Minute },
			wantErr: "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"},
		{name: "a max expiration of an hour is accepted", mutate: func(c *authn.Config) { c.MaxTokenExpiration = time.Hour }},
		{name: "a max expiration over 2^32s is refused", mutate: func(c *authn.Config) { c.MaxTokenExpiration = time.Duration(1<<32+1) * time.Second },
			wantErr: "between 1 hour and 2^32 seconds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := authn.DefaultConfig()
			tc.mutate(c)
			err := authn.ValidateConfig(c)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
