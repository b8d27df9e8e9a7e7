package authn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	authenticationapi "k8s.io/kubernetes/pkg/apis/authentication"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// kidOf is the "kid" header of a compact JWS.
func kidOf(t *testing.T, tok string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Kid string `json:"kid"`
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	if h.Alg != "ES256" {
		t.Fatalf("alg %q, want ES256", h.Alg)
	}
	return h.Kid
}

func keyCount(t *testing.T, l *localLog) int {
	t.Helper()
	res, err := l.f.List(fsm.Prefix{Space: authn.FirstKey.Space, Resource: authn.FirstKey.Resource}, fsm.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.KVs)
}

// TestEnsureKeyOnce: every new leader runs EnsureKey; only the first writes.
func TestEnsureKeyOnce(t *testing.T) {
	w := newWorld(t, nil)
	for i := 0; i < 3; i++ {
		if err := w.keys.EnsureKey(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := keyCount(t, w.log); n != 1 {
		t.Fatalf("%d keys after repeated EnsureKey, want 1", n)
	}
	if kv, _, _ := w.log.f.Get(authn.FirstKey, 0); kv == nil {
		t.Fatal("the first key is not at authn.FirstKey, which followers wait for")
	}
}

// TestEnsureKeyRace: two would-be leaders bootstrapping at once write one
// key between them (MustNotExist), and both succeed.
func TestEnsureKeyRace(t *testing.T) {
	l := newLocalLog()
	stores := []*authn.KeyStore{authn.NewKeyStore(l, l.f, storage.AtRest{}), authn.NewKeyStore(l, l.f, storage.AtRest{}), authn.NewKeyStore(l, nil, storage.AtRest{})}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, k := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = k.EnsureKey(context.Background()) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := keyCount(t, l); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
	// Every store signs with that one key.
	var kids []string
	for _, k := range stores {
		tok, err := k.Generator("https://issuer.example").GenerateToken(context.Background(), mustClaims(), struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, kidOf(t, tok))
	}
	if kids[0] != kids[1] || kids[1] != kids[2] {
		t.Fatalf("stores sign with different keys: %v", kids)
	}
}

// TestRotation: after a rotation new tokens carry the new key id, and the
// tokens the old key signed still verify.
func TestRotation(t *testing.T) {
	w := newWorld(t, nil)
	sa := w.serviceAccount("default", "app")
	auds := []string{authn.DefaultIssuer}
	before := mint(t, w.id.Tokens, sa, nil, nil, auds, nil)

	kid, err := w.keys.Rotate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if kid == kidOf(t, before) {
		t.Fatal("rotation kept the key id")
	}
	after := mint(t, w.id.Tokens, sa, nil, nil, auds, nil)
	if got := kidOf(t, after); got != kid {
		t.Fatalf("token after rotation signed by %q, want the new key %q", got, kid)
	}
	for name, tok := range map[string]string{"old-key token": before, "new-key token": after} {
		if _, ok, err := w.authenticate(tok); !ok {
			t.Fatalf("%s rejected after rotation: %v", name, err)
		}
	}
	if n := keyCount(t, w.log); n != 2 {
		t.Fatalf("%d keys after one rotation, want 2 (old keys stay for verification)", n)
	}
	if got := len(w.keys.PublicKeys().GetPublicKeys(context.Background(), "")); got != 2 {
		t.Fatalf("%d public keys, want 2", got)
	}
}

// TestRotationSeenThroughAppliedStream: a node that did not write the new
// key (a follower) signs with it once it has applied it, and tells its
// public-key listeners.
func TestRotationSeenThroughAppliedStream(t *testing.T) {
	l := newLocalLog()
	leader := authn.NewKeyStore(l, l.f, storage.AtRest{})
	follower := authn.NewKeyStore(l, l.f, storage.AtRest{})
	if err := leader.EnsureKey(context.Background()); err != nil {
		t.Fatal(err)
	}
	gen := follower.Generator("https://issuer.example")
	first, err := gen.GenerateToken(context.Background(), mustClaims(), struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan struct{}, 4)
	follower.PublicKeys().AddListener(listenerFunc(func() { told <- struct{}{} }))
	kid, err := leader.Rotate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-told
	second, err := gen.GenerateToken(context.Background(), mustClaims(), struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	if kidOf(t, first) == kid || kidOf(t, second) != kid {
		t.Fatalf("follower signed with %q then %q; the rotation wrote %q", kidOf(t, first), kidOf(t, second), kid)
	}
}

type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }

// TestNoKeyYet: a node that has applied no key cannot sign and accepts no
// ServiceAccount token.
func TestNoKeyYet(t *testing.T) {
	l := newLocalLog()
	k := authn.NewKeyStore(l, l.f, storage.AtRest{})
	if _, err := k.Generator("https://issuer.example").GenerateToken(context.Background(), mustClaims(), struct{}{}); !errors.Is(err, authn.ErrNoSigningKey) {
		t.Fatalf("err %v, want ErrNoSigningKey", err)
	}
	if keys := k.PublicKeys().GetPublicKeys(context.Background(), ""); len(keys) != 0 {
		t.Fatalf("%d public keys before any key exists", len(keys))
	}
}

// TestBadStoredKeyNeverEchoed: an unreadable key is reported by generation,
// never by its bytes.
func TestBadStoredKeyNeverEchoed(t *testing.T) {
	l := newLocalLog()
	secret := `{"alg":"ES256","pkcs8":"c2VjcmV0LWtleS1tYXRlcmlhbA=="}`
	if _, err := l.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: authn.FirstKey, Value: []byte(secret)}); err != nil {
		t.Fatal(err)
	}
	k := authn.NewKeyStore(l, l.f, storage.AtRest{})
	_, err := k.Generator("https://issuer.example").GenerateToken(context.Background(), mustClaims(), struct{}{})
	if !errors.Is(err, authn.ErrBadKey) {
		t.Fatalf("err %v, want ErrBadKey", err)
	}
	for _, leak := range []string{"c2VjcmV0LWtleS1tYXRlcmlhbA", "secret-key-material", "pkcs8"} {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("error %q carries key material", err)
		}
	}
}

// TestStoredKeyDecodedStrictly: only what the key store writes is a key.
// A real P-256 key inside a JSON object shaped otherwise (an API object
// written under the key's name, fields in another case) signs nothing,
// and the error quotes nothing stored.
func TestStoredKeyDecodedStrictly(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := base64.StdEncoding.EncodeToString(der)
	cases := []struct {
		name, value string
		signs       bool
	}{
		{"as the key store writes it", `{"alg":"ES256","pkcs8":"` + pkcs8 + `"}`, true},
		{"an API object around it", `{"apiVersion":"trustplane.internal/v1","kind":"Key","metadata":{"name":"1"},"alg":"ES256","pkcs8":"` + pkcs8 + `"}`, false},
		{"field names in another case", `{"ALG":"ES256","PKCS8":"` + pkcs8 + `"}`, false},
		{"a field twice", `{"alg":"ES256","pkcs8":"` + pkcs8 + `","alg":"ES256"}`, false},
		{"another algorithm, not quoted", `{"alg":"stored-marker","pkcs8":"` + pkcs8 + `"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLocalLog()
			if _, err := l.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: authn.FirstKey, Value: []byte(c.value)}); err != nil {
				t.Fatal(err)
			}
			k := authn.NewKeyStore(l, l.f, storage.AtRest{})
			_, err := k.Generator("https://issuer.example").GenerateToken(context.Background(), mustClaims(), struct{}{})
			if c.signs {
				if err != nil {
					t.Fatalf("a key as written does not sign: %v", err)
				}
				return
			}
			if !errors.Is(err, authn.ErrBadKey) {
				t.Fatalf("err %v, want ErrBadKey", err)
			}
			if strings.Contains(err.Error(), "stored-marker") || strings.Contains(err.Error(), pkcs8[:16]) {
				t.Fatalf("error %q quotes the stored value", err)
			}
		})
	}
}

func mustClaims() *jwt.Claims {
	return &jwt.Claims{Subject: "system:serviceaccount:default:app", Audience: jwt.Audience{"a"}, Expiry: at(time.Hour)}
}

// TestTokenRequestWaitsForKey: a TokenRequest on a node without a key
// waits for one, and answers 503 with Retry-After if none comes.
func TestTokenRequestWaitsForKey(t *testing.T) {
	w := newWorldKeyed(t, false, func(c *authn.Config) { c.KeyWait = 300 * time.Millisecond })
	w.serviceAccount("default", "app")
	var tokenRequest *registry.Virtual
	for _, v := range w.id.Virtuals {
		if v.Subresource == "token" {
			tokenRequest = v
		}
	}
	create := func() (runtime.Object, error) {
		return tokenRequest.Create(nsCtx("default"), "app", &authenticationapi.TokenRequest{Spec: authenticationapi.TokenRequestSpec{ExpirationSeconds: 3600}}, nil, &metav1.CreateOptions{})
	}
	_, err := create()
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Code != 503 || se.Status().Details == nil || se.Status().Details.RetryAfterSeconds != 1 {
		t.Fatalf("without a key: %v, want 503 with Retry-After 1", err)
	}
	done := make(chan error, 1)
	go func() {
		out, err := create()
		if err == nil && out.(*authenticationapi.TokenRequest).Status.Token == "" {
			err = errors.New("no token")
		}
		done <- err
	}()
	if err := w.keys.EnsureKey(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a key written while waiting: %v", err)
	}
}

// TestDiscoveryFollowsRotation: the JWKS lists every verification key,
// public parts only, and picks up a rotation; a non-https issuer serves no
// discovery, as kube.
func TestDiscoveryFollowsRotation(t *testing.T) {
	w := newWorld(t, nil)
	jwks := func() []map[string]any {
		t.Helper()
		rec := httptest.NewRecorder()
		w.id.Paths[serviceaccount.JWKSPath].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, serviceaccount.JWKSPath, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("jwks: %d %s", rec.Code, rec.Body)
		}
		var set struct {
			Keys []map[string]any `json:"keys"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &set); err != nil {
			t.Fatal(err)
		}
		for _, k := range set.Keys {
			if _, ok := k["d"]; ok {
				t.Fatalf("jwks carries a private key: %s", rec.Body)
			}
		}
		return set.Keys
	}
	if n := len(jwks()); n != 1 {
		t.Fatalf("%d keys before rotation", n)
	}
	kid, err := w.keys.Rotate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	keys := jwks()
	if len(keys) != 2 || (keys[0]["kid"] != kid && keys[1]["kid"] != kid) {
		t.Fatalf("after rotation to %s: %v", kid, keys)
	}

	plain := newWorld(t, func(c *authn.Config) { c.Issuer = "kubernetes/serviceaccount-like" })
	if len(plain.id.Paths) != 0 {
		t.Fatalf("discovery served for a non-URL issuer: %v", plain.id.Paths)
	}
}
