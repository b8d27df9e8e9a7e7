package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// testIssuer is the --service-account-issuer of the token tests' node.
const testIssuer = "https://issuer.trustplane.test"

// claimsOf decodes a JWT's payload without verifying it.
func claimsOf(t testing.TB, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// tokenKubeconfig writes a kubeconfig that authenticates with token only.
func tokenKubeconfig(t testing.TB, n *node, token string) string {
	t.Helper()
	cfg := n.restConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	p := filepath.Join(t.TempDir(), "token.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// requestToken asks for a token of ns/sa through the TokenRequest API.
func requestToken(t testing.TB, cs kubernetes.Interface, ns, sa string, spec authenticationv1.TokenRequestSpec) *authenticationv1.TokenRequest {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, sa, err)
	}
	return tr
}

func review(t testing.TB, cs kubernetes.Interface, token string, auds ...string) authenticationv1.TokenReviewStatus {
	t.Helper()
	tr, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: auds}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenReview: %v", err)
	}
	return tr.Status
}

// rejected checks a review that must fail, with an error containing want.
func rejected(t testing.TB, st authenticationv1.TokenReviewStatus, want string) {
	t.Helper()
	if st.Authenticated || st.User.Username != "" {
		t.Fatalf("authenticated as %q, want rejected (%s)", st.User.Username, want)
	}
	if !strings.Contains(st.Error, want) {
		t.Fatalf("error %q, want it to contain %q", st.Error, want)
	}
}

// eventually polls check until it returns "" (bounded by attempts, not by
// a clock assertion); it fails with check's last complaint.
func eventually(t testing.TB, attempts int, check func() string) {
	t.Helper()
	var last string
	for i := 0; i < attempts; i++ {
		if last = check(); last == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after %d attempts: %s", attempts, last)
}

func createPod(t testing.TB, cs kubernetes.Interface, ns, name, sa string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func makeSA(t testing.TB, cs kubernetes.Interface, ns, name string) *corev1.ServiceAccount {
	t.Helper()
	sa, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// TestTokenAPIs drives TokenRequest, bearer tokens, TokenReview and
// SelfSubjectReview on one node, as client-go and kubectl.
func TestTokenAPIs(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte("static-secret-token,static-ops,uid-ops,\"ops,system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// v1beta1 SelfSubjectReview's removal release is 1.33: named, it is
	// served again (TestE2EVersions has the default).
	n := startNode(t, "--service-account-issuer", testIssuer, "--token-auth-file", tokenFile, "--service-account-max-token-expiration", "2h",
		"--runtime-config", "authentication.k8s.io/v1beta1=true")
	cs := n.clientset()
	ctx := context.Background()
	sa := makeSA(t, cs, "default", "app")

	t.Run("kubectl create token issues kube's claims", func(t *testing.T) {
		tok := n.mustKubectl("create", "token", "app")
		c := claimsOf(t, tok)
		if c["iss"] != testIssuer || c["sub"] != "system:serviceaccount:default:app" {
			t.Fatalf("iss %v sub %v", c["iss"], c["sub"])
		}
		if aud, _ := c["aud"].([]any); len(aud) != 1 || aud[0] != testIssuer {
			t.Fatalf("aud %v, want [%s] (the API audience)", c["aud"], testIssuer)
		}
		exp, iat, nbf := c["exp"].(float64), c["iat"].(float64), c["nbf"].(float64)
		if exp-iat != 3600 || nbf != iat {
			t.Fatalf("exp-iat %v nbf-iat %v, want 3600 and 0", exp-iat, nbf-iat)
		}
		if jti, _ := c["jti"].(string); jti == "" {
			t.Fatal("no jti")
		}
		k, _ := c["kubernetes.io"].(map[string]any)
		sac, _ := k["serviceaccount"].(map[string]any)
		if k["namespace"] != "default" || sac["name"] != "app" || sac["uid"] != string(sa.UID) {
			t.Fatalf("kubernetes.io claim %v", k)
		}
	})

	t.Run("a token is a bearer credential", func(t *testing.T) {
		tok := requestToken(t, cs, "default", "app", authenticationv1.TokenRequestSpec{}).Status.Token
		tc, err := kubernetes.NewForConfig(n.tokenConfig(t, tok))
		if err != nil {
			t.Fatal(err)
		}
		ssr, err := tc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := ssr.Status.UserInfo
		if u.Username != "system:serviceaccount:default:app" || u.UID != string(sa.UID) {
			t.Fatalf("user %+v", u)
		}
		if want := []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}; !slices.Equal(u.Groups, want) {
			t.Fatalf("groups %v, want %v", u.Groups, want)
		}
		if got := u.Extra["authentication.kubernetes.io/credential-id"]; len(got) != 1 || got[0] != "JTI="+claimsOf(t, tok)["jti"].(string) {
			t.Fatalf("credential-id %v", got)
		}
	})

	t.Run("kubectl auth whoami shows the token's user and the admin", func(t *testing.T) {
		tok := n.mustKubectl("create", "token", "app")
		out := n.mustKubectl("--kubeconfig", tokenKubeconfig(t, n, tok), "auth", "whoami")
		if !row("Username", "system:serviceaccount:default:app").MatchString(out) ||
			!row("Groups", "[system:serviceaccounts system:serviceaccounts:default system:authenticated]").MatchString(out) {
			t.Fatalf("whoami as the token:\n%s", out)
		}
		out = n.mustKubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if out != "trustplane-admin [\"system:masters\",\"system:authenticated\"]" {
			t.Fatalf("whoami as admin: %q", out)
		}
		// The effective user is the impersonated one.
		out = n.mustKubectl("auth", "whoami", "--as", "dave", "--as-group", "auditors", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if out != "dave [\"auditors\",\"system:authenticated\"]" {
			t.Fatalf("whoami impersonating dave: %q", out)
		}
	})

	t.Run("the static token file's user authenticates", func(t *testing.T) {
		out := n.mustKubectl("--kubeconfig", tokenKubeconfig(t, n, "static-secret-token"), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.uid} {.status.userInfo.groups}")
		if out != `static-ops uid-ops ["ops","system:masters","system:authenticated"]` {
			t.Fatalf("whoami: %q", out)
		}
	})

	t.Run("a bad token gets 401 Status", func(t *testing.T) {
		r := do(t, n.anonClient(), http.MethodGet, n.url()+"/api/v1/namespaces", map[string]string{"Authorization": "Bearer not-a-token"}, nil)
		wantStatus(t, r, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		tc, err := kubernetes.NewForConfig(n.tokenConfig(t, "static-secret-token-but-wrong"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		wantAPIError(t, err, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	})

	t.Run("expiration defaults, minimum and cap", func(t *testing.T) {
		tr := requestToken(t, cs, "default", "app", authenticationv1.TokenRequestSpec{})
		if tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 3600 {
			t.Fatalf("default expirationSeconds %v, want 3600", tr.Spec.ExpirationSeconds)
		}
		if got := tr.Spec.Audiences; !slices.Equal(got, []string{testIssuer}) {
			t.Fatalf("default audiences %v", got)
		}
		long := requestToken(t, cs, "default", "app", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3 * 3600)})
		if *long.Spec.ExpirationSeconds != 7200 {
			t.Fatalf("capped expirationSeconds %d, want 7200 (--service-account-max-token-expiration)", *long.Spec.ExpirationSeconds)
		}
		c := claimsOf(t, long.Status.Token)
		if d := c["exp"].(float64) - c["iat"].(float64); d != 7200 {
			t.Fatalf("capped token lives %vs", d)
		}
		if skew := long.Status.ExpirationTimestamp.Unix() - int64(c["exp"].(float64)); skew > 0 || skew < -1 {
			t.Fatalf("status expirationTimestamp %v vs exp %v", long.Status.ExpirationTimestamp, c["exp"])
		}
		_, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "app",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](599)}}, metav1.CreateOptions{})
		wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes`)
	})

	t.Run("TokenRequest errors", func(t *testing.T) {
		makeSA(t, cs, "default", "other")
		web := createPod(t, cs, "default", "web", "app")
		createPod(t, cs, "default", "elsewhere", "other")
		bind := func(kind, name string, uid types.UID) error {
			_, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "app", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: kind, APIVersion: "v1", Name: name, UID: uid},
			}}, metav1.CreateOptions{})
			return err
		}
		_, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `serviceaccounts "nobody" not found`)
		wantAPIError(t, bind("Pod", "absent", ""), http.StatusNotFound, metav1.StatusReasonNotFound, `pods "absent" not found`)
		wantAPIError(t, bind("Secret", "absent", ""), http.StatusNotFound, metav1.StatusReasonNotFound, `secrets "absent" not found`)
		wantAPIError(t, bind("Pod", "web", "0000-not-the-uid"), http.StatusConflict, metav1.StatusReasonConflict,
			`Operation cannot be fulfilled on Pod "web": the UID in the bound object reference (0000-not-the-uid) does not match the UID in record. The object might have been deleted and then recreated`)
		wantAPIError(t, bind("Pod", "elsewhere", ""), http.StatusBadRequest, metav1.StatusReasonBadRequest,
			`cannot bind token for serviceaccount "app" to pod running with different serviceaccount name.`)
		wantAPIError(t, bind("ConfigMap", "x", ""), http.StatusBadRequest, metav1.StatusReasonBadRequest,
			`cannot bind token to object of type /v1, Kind=ConfigMap`)
		if err := bind("Pod", "web", web.UID); err != nil {
			t.Fatalf("binding to the pod with its uid: %v", err)
		}
		// kubectl's flags reach the same checks.
		out, err := n.kubectl("create", "token", "app", "--bound-object-kind", "Pod", "--bound-object-name", "web", "--bound-object-uid", "bad-uid")
		if err == nil || !strings.Contains(out, "does not match the UID in record") {
			t.Fatalf("kubectl with a wrong uid: %v\n%s", err, out)
		}
	})

	t.Run("TokenReview", func(t *testing.T) {
		pod := createPod(t, cs, "default", "reviewed", "app")
		podTok := requestToken(t, cs, "default", "app", authenticationv1.TokenRequestSpec{
			Audiences:      []string{"vault", "db"},
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "reviewed", UID: pod.UID},
		}).Status.Token

		st := review(t, cs, podTok, "db", "other")
		if !st.Authenticated || st.Error != "" || st.User.Username != "system:serviceaccount:default:app" {
			t.Fatalf("pod-bound token: %+v", st)
		}
		if !slices.Equal(st.Audiences, []string{"db"}) {
			t.Fatalf("audiences %v, want the intersection [db]", st.Audiences)
		}
		wantExtra := map[string]string{
			"authentication.kubernetes.io/pod-name":      "reviewed",
			"authentication.kubernetes.io/pod-uid":       string(pod.UID),
			"authentication.kubernetes.io/credential-id": "JTI=" + claimsOf(t, podTok)["jti"].(string),
		}
		for k, v := range wantExtra {
			if got := st.User.Extra[k]; len(got) != 1 || got[0] != v {
				t.Fatalf("extra %s = %v, want [%s]", k, got, v)
			}
		}
		rejected(t, review(t, cs, podTok), "is invalid for the target audiences")
		rejected(t, review(t, cs, podTok, "nobody-else"), "is invalid for the target audiences")

		plain := requestToken(t, cs, "default", "app", authenticationv1.TokenRequestSpec{}).Status.Token
		if st := review(t, cs, plain); !st.Authenticated || !slices.Equal(st.Audiences, []string{testIssuer}) {
			t.Fatalf("default audiences: %+v", st)
		}

		// Forged: our claims, another key.
		other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		forge := func(claims map[string]any, kid string) string {
			opts := (&jose.SignerOptions{}).WithType("JWT")
			if kid != "" {
				opts = opts.WithHeader("kid", kid)
			}
			signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: other}, opts)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := jwt.Signed(signer).Claims(claims).CompactSerialize()
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		rejected(t, review(t, cs, forge(claimsOf(t, plain), "someone-elses-key")), "invalid signature, no keys found")
		rejected(t, review(t, cs, forge(claimsOf(t, plain), "")), "error in cryptographic primitive")
		// Our kid in the header, another key's signature.
		parts := strings.Split(plain, ".")
		forgedParts := strings.Split(forge(claimsOf(t, plain), ""), ".")
		rejected(t, review(t, cs, parts[0]+"."+parts[1]+"."+forgedParts[2]), "error in cryptographic primitive")
		// Tampered: another token's payload under this signature.
		rejected(t, review(t, cs, parts[0]+"."+strings.Split(podTok, ".")[1]+"."+parts[2]), "error in cryptographic primitive")
		// Wrong issuer: not a token of this cluster at all.
		wrongIss := claimsOf(t, plain)
		wrongIss["iss"] = "https://someone-else.example"
		rejected(t, review(t, cs, forge(wrongIss, "")), "invalid bearer token")
		rejected(t, review(t, cs, "garbage"), "invalid bearer token")

		// The bound pod goes away: the token stops authenticating (after
		// the short token cache lifetime at most).
		if err := cs.CoreV1().Pods("default").Delete(ctx, "reviewed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 100, func() string {
			if st := review(t, cs, podTok, "db"); st.Authenticated || !strings.Contains(st.Error, "service account token has been invalidated") {
				return fmt.Sprintf("token of a deleted pod: %+v", st)
			}
			return ""
		})
		// Recreated with the same name: a new uid, still rejected.
		createPod(t, cs, "default", "reviewed", "app")
		eventually(t, 100, func() string {
			if st := review(t, cs, podTok, "db"); st.Authenticated || !strings.Contains(st.Error, "does not match service account pod ref claim") {
				return fmt.Sprintf("token of a recreated pod: %+v", st)
			}
			return ""
		})

		_, err = cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
		wantAPIError(t, err, http.StatusBadRequest, metav1.StatusReasonBadRequest, "token is required for TokenReview in authentication")
	})

	t.Run("a deleted service account's tokens stop working", func(t *testing.T) {
		makeSA(t, cs, "default", "shortlived")
		tok := requestToken(t, cs, "default", "shortlived", authenticationv1.TokenRequestSpec{}).Status.Token
		if st := review(t, cs, tok); !st.Authenticated {
			t.Fatalf("fresh token: %+v", st)
		}
		if err := cs.CoreV1().ServiceAccounts("default").Delete(ctx, "shortlived", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 100, func() string {
			if st := review(t, cs, tok); st.Authenticated || !strings.Contains(st.Error, `serviceaccounts "shortlived" not found`) {
				return fmt.Sprintf("token of a deleted service account: %+v", st)
			}
			return ""
		})
	})

	t.Run("SelfSubjectReview v1beta1, turned on, is served with kube's deprecation warning", func(t *testing.T) {
		r := do(t, n.httpClient(), http.MethodPost, n.url()+"/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
			jsonHeader("application/json"), []byte(`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"SelfSubjectReview"}`))
		if r.code != http.StatusCreated {
			t.Fatalf("code %d: %s", r.code, r.body)
		}
		if got, want := r.header.Get("Warning"), `299 - "authentication.k8s.io/v1beta1 SelfSubjectReview is deprecated in v1.30+, unavailable in v1.33+"`; got != want {
			t.Fatalf("Warning %q, want %q", got, want)
		}
		var ssr struct {
			APIVersion string `json:"apiVersion"`
			Status     struct {
				UserInfo authenticationv1.UserInfo `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal(r.body, &ssr); err != nil {
			t.Fatal(err)
		}
		if ssr.APIVersion != "authentication.k8s.io/v1beta1" || ssr.Status.UserInfo.Username != "trustplane-admin" {
			t.Fatalf("answer %s", r.body)
		}
	})

	t.Run("OIDC discovery documents", func(t *testing.T) {
		testOIDCDiscovery(t, n, cs)
	})
}

// testOIDCDiscovery checks kube's two documents: they parse, name our
// issuer, carry public keys only, and verify a token the node issued.
func testOIDCDiscovery(t *testing.T, n *node, cs kubernetes.Interface) {
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/.well-known/openid-configuration", nil, nil)
	if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("openid-configuration: %d %s: %s", r.code, r.header.Get("Content-Type"), r.body)
	}
	if cc := r.header.Get("Cache-Control"); cc != "public, max-age=3600" {
		t.Fatalf("Cache-Control %q", cc)
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Resp    []string `json:"response_types_supported"`
		Subj    []string `json:"subject_types_supported"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Issuer != testIssuer || doc.JWKSURI != "https://"+n.listen+"/openid/v1/jwks" ||
		!slices.Equal(doc.Resp, []string{"id_token"}) || !slices.Equal(doc.Subj, []string{"public"}) || !slices.Equal(doc.Algs, []string{"ES256"}) {
		t.Fatalf("discovery document %s", r.body)
	}

	r = do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil)
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("jwks: %d %s: %s", r.code, r.header.Get("Content-Type"), r.body)
	}
	var raw struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Keys) == 0 {
		t.Fatalf("no keys: %s", r.body)
	}
	for _, k := range raw.Keys {
		for _, private := range []string{"d", "p", "q", "dp", "dq", "qi", "k"} {
			if _, ok := k[private]; ok {
				t.Fatalf("jwks key carries private member %q", private)
			}
		}
		if k["kty"] != "EC" || k["crv"] != "P-256" || k["alg"] != "ES256" || k["use"] != "sig" {
			t.Fatalf("key %v", k)
		}
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(r.body, &set); err != nil {
		t.Fatal(err)
	}
	tok := requestToken(t, cs, "default", "app", authenticationv1.TokenRequestSpec{}).Status.Token
	parsed, err := jwt.ParseSigned(tok)
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Key(parsed.Headers[0].KeyID)
	if len(keys) != 1 || !keys[0].IsPublic() {
		t.Fatalf("jwks has %d public keys for kid %q", len(keys), parsed.Headers[0].KeyID)
	}
	var claims jwt.Claims
	if err := parsed.Claims(keys[0].Key, &claims); err != nil {
		t.Fatalf("a token does not verify with the published key: %v", err)
	}
	if claims.Issuer != testIssuer {
		t.Fatalf("iss %q", claims.Issuer)
	}
}

// TestTokenAcrossNodes: a token issued through one node authenticates on
// every node, since each verifies with the replicated keys it has applied.
func TestTokenAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	cs := nodes[0].clientset()
	makeSA(t, cs, "default", "roamer")
	tok := requestToken(t, nodes[1].clientset(), "default", "roamer", authenticationv1.TokenRequestSpec{}).Status.Token
	for _, n := range nodes {
		cfg := n.tokenConfig(t, tok)
		tc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 50, func() string {
			ssr, err := tc.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Sprintf("node %s: %v", n.name, err)
			}
			if u := ssr.Status.UserInfo.Username; u != "system:serviceaccount:default:roamer" {
				return fmt.Sprintf("node %s: user %q", n.name, u)
			}
			return ""
		})
	}
	if st := review(t, nodes[2].clientset(), tok); !st.Authenticated {
		t.Fatalf("TokenReview through %s: %+v", nodes[2].name, st)
	}

	// Rotation through a follower: the leader writes a new key, every
	// node signs with it, and the old token still verifies everywhere.
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	kidOf := func(token string) string {
		var h struct {
			Kid string `json:"kid"`
		}
		b, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
		if err != nil || json.Unmarshal(b, &h) != nil {
			t.Fatalf("token header: %v", err)
		}
		return h.Kid
	}
	oldKid := kidOf(tok)
	r := do(t, f.userHTTP(t, "operator-wannabe"), http.MethodPost, f.url()+"/debug/trustplane/signing-keys/rotate", nil, nil)
	if r.code != http.StatusForbidden {
		t.Fatalf("rotation by a user outside system:masters: %d %s", r.code, r.body)
	}
	r = do(t, f.httpClient(), http.MethodPost, f.url()+"/debug/trustplane/signing-keys/rotate", nil, nil)
	var rotated struct {
		Kid string `json:"kid"`
	}
	if r.code != http.StatusOK || json.Unmarshal(r.body, &rotated) != nil || rotated.Kid == "" || rotated.Kid == oldKid {
		t.Fatalf("rotation through a follower: %d %s", r.code, r.body)
	}
	for _, n := range nodes {
		eventually(t, 50, func() string {
			if kid := kidOf(requestToken(t, n.clientset(), "default", "roamer", authenticationv1.TokenRequestSpec{}).Status.Token); kid != rotated.Kid {
				return fmt.Sprintf("node %s signs with %s, want the new key %s", n.name, kid, rotated.Kid)
			}
			return ""
		})
		if st := review(t, n.clientset(), tok); !st.Authenticated {
			t.Fatalf("a token from before the rotation no longer verifies on %s: %+v", n.name, st)
		}
	}
	var jwks struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	r = do(t, nodes[2].httpClient(), http.MethodGet, nodes[2].url()+"/openid/v1/jwks", nil, nil)
	if err := json.Unmarshal(r.body, &jwks); err != nil || len(jwks.Keys) != 2 {
		t.Fatalf("jwks after rotation: %s", r.body)
	}
}

// TestTokenFlagsValidated: serve refuses bad token flags with kube's
// messages instead of starting.
func TestTokenFlagsValidated(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a max token expiration under an hour", []string{"--service-account-max-token-expiration", "30m"},
			"the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"},
		{"a missing token file", []string{"--token-auth-file", "/nonexistent/tokens.csv"}, "--token-auth-file:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen", freePort(t), "--raft-addr", freePort(t)}, tc.args...)
			out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
			if err == nil || ctx.Err() != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("serve %v: %v, want a failure mentioning %q:\n%s", tc.args, err, tc.want, out)
			}
		})
	}
}
