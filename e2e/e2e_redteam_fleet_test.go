package e2e_test

// Red-team attacks on the fleet identity surfaces: the anonymous paths of
// --authentication-config, federated issuers, POST
// /externaljwt/v1alpha1/sign and trustplane external-signer. Each test
// performs an attack against real trustplane processes and passes when the
// attack fails. SignClaimsReadByRelyingParties, SignLifetimeOverflow,
// SignLifetimeFromFutureIat and FederatedIssuerReachesInside succeeded
// against 09bb26b (fixed by 854377c): they stay as regressions.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	jose "gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	v1alpha1 "k8s.io/externaljwt/apis/v1alpha1"
	"k8s.io/utils/ptr"
)

// rtOwnIssuer is the --service-account-issuer the nodes run with.
const rtOwnIssuer = "https://kubernetes.default.svc.cluster.local"

// rtSignerRBAC lets user sign for issuers and audiences (every one of a
// kind when its list is empty: resourceNames left out), as
// externalSignerRBAC does under a name of its own.
func rtSignerRBAC(name, user string, issuers, audiences []string) string {
	names := func(l []string) string {
		if len(l) == 0 {
			return ""
		}
		b, _ := json.Marshal(l)
		return "\n  resourceNames: " + string(b)
	}
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: %[1]s
rules:
- nonResourceURLs: ["/externaljwt/v1alpha1/sign"]
  verbs: ["post"]
- apiGroups: ["externaljwt.trustplane.io"]
  resources: ["issuers"]%[2]s
  verbs: ["sign"]
- apiGroups: ["externaljwt.trustplane.io"]
  resources: ["audiences"]%[3]s
  verbs: ["sign"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: %[1]s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %[4]s}
`, name, names(issuers), names(audiences), user)
}

// rtApply applies manifest as the admin.
func rtApply(t *testing.T, n *node, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	n.mustKubectl("apply", "-f", f)
}

// rtSigner posts claims segments to the signing endpoint as one user.
type rtSigner struct {
	t  *testing.T
	n  *node
	hc *http.Client
}

func rtNewSigner(t *testing.T, n *node, cfg *rest.Config) *rtSigner {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc.Timeout = 10 * time.Second
	return &rtSigner{t: t, n: n, hc: hc}
}

// signSegment posts seg (the claims segment as sent) and returns the
// status, the body and, on 200, the whole token.
func (s *rtSigner) signSegment(seg string) (int, string, string) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"claims": seg})
	r := do(s.t, s.hc, http.MethodPost, s.n.url()+"/externaljwt/v1alpha1/sign", map[string]string{"Content-Type": "application/json"}, body)
	if r.code != http.StatusOK {
		return r.code, string(r.body), ""
	}
	var out struct{ Header, Signature string }
	if err := json.Unmarshal(r.body, &out); err != nil || out.Header == "" || out.Signature == "" {
		s.t.Fatalf("a 200 without a header and a signature: %s", r.body)
	}
	return r.code, string(r.body), out.Header + "." + seg + "." + out.Signature
}

// sign posts claims (JSON text) as the segment kube would send.
func (s *rtSigner) sign(claims string) (int, string, string) {
	return s.signSegment(base64.RawURLEncoding.EncodeToString([]byte(claims)))
}

// rtJWKS is n's key set, read as the admin.
func rtJWKS(t *testing.T, n *node) jose.JSONWebKeySet {
	t.Helper()
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil)
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(r.body, &set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("jwks: %d %s", r.code, r.body)
	}
	return set
}

// rtGoJose reads token's claims as go-jose's own JSON does (exact,
// case-sensitive keys; duplicates refused), after verifying it with set:
// the reading of a relying party that is not Go's encoding/json.
func rtGoJose(t *testing.T, token string, set jose.JSONWebKeySet) (*jwt.Claims, error) {
	t.Helper()
	j, err := jwt.ParseSigned(token)
	if err != nil {
		return nil, err
	}
	kid := ""
	if len(j.Headers) > 0 {
		kid = j.Headers[0].KeyID
	}
	keys := set.Key(kid)
	if len(keys) == 0 {
		t.Fatalf("no key %q in the key set", kid)
	}
	var c jwt.Claims
	if err := j.Claims(keys[0].Key, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// rtAuthenticates reports whether n accepts token: the API with it as a
// bearer token, and the admin's TokenReview of it.
func rtAuthenticates(t *testing.T, n *node, token string) bool {
	t.Helper()
	r := do(t, n.anonClient(), http.MethodGet, n.url()+"/api", map[string]string{"Authorization": "Bearer " + token}, nil)
	tr, err := n.clientset().AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.code != http.StatusUnauthorized || tr.Status.Authenticated
}

// TestRedteamFleetSignOwnIssuerUnreachable: a signer RBAC lets sign for
// every issuer and every audience (the broadest grant an operator can
// make) tries to mint a token this cluster accepts: its own issuer
// written every other way (escapes, look-alikes, trailing slash, case,
// whitespace), duplicate and case-variant keys, the legacy issuer, and a
// subject and audience of the cluster's. The own issuers are refused
// (403); whatever is signed, no node accepts (its authenticator reads the
// claims as the endpoint does). The claims' other rules hold (400/413),
// nothing reaches the audit log at RequestResponse, a namespace's
// cluster-admin cannot post, and anonymous is 401.
func TestRedteamFleetSignOwnIssuerUnreachable(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	n := startNode(t, "--audit-log-path", auditPath, "--audit-policy-file", writeAuditPolicy(t))
	n.trustplaneOnly(t, "trustplane's signing endpoint")
	rtApply(t, n, rtSignerRBAC("rt-any-signer", "rt-any", nil, nil))
	s := rtNewSigner(t, n, n.userConfig(t, "rt-any"))
	now := time.Now().Unix()
	waitFor(t, 10*time.Second, "RBAC to allow signing", func() bool {
		c, _, _ := s.sign(fmt.Sprintf(`{"iss":"https://ok.example","aud":"x","iat":%d,"exp":%d}`, now, now+60))
		return c == http.StatusOK
	})
	// The claims of a real token of this cluster (a TokenRequest for an
	// existing ServiceAccount), which authenticates: only "iss" changes
	// below, so a refusal is the issuer's doing.
	n.mustKubectl("create", "serviceaccount", "rt-victim", "-n", "default")
	var real string
	waitFor(t, 10*time.Second, "a token of rt-victim", func() bool {
		tr, err := n.clientset().CoreV1().ServiceAccounts("default").CreateToken(context.Background(), "rt-victim",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return false
		}
		real = tr.Status.Token
		return true
	})
	if !rtAuthenticates(t, n, real) {
		t.Fatal("the real token does not authenticate: the checks below would prove nothing")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(real, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	ownIss := fmt.Sprintf(`"iss":%q`, rtOwnIssuer)
	if !strings.Contains(string(payload), ownIss) {
		t.Fatalf("the real token's claims %s have no %s", payload, ownIss)
	}
	body := func(issJSON string) string { return strings.Replace(string(payload), ownIss, `"iss":`+issJSON, 1) }
	// The real claims themselves: refused.
	if c, b, _ := s.sign(string(payload)); c != http.StatusForbidden || !strings.Contains(b, "this cluster's own issuer") {
		t.Errorf("the real claims: %d %s, want 403 own issuer", c, b)
	}
	// Refused (403): the endpoint reads these as an own issuer.
	for _, iss := range []string{
		`"https:\/\/kubernetes.default.svc.cluster.local"`,
		`"\u0068ttps://kubernetes.default.svc.cluster.local"`,
		`"kubernetes/serviceaccount"`,
		`"kubernetes\/serviceaccount"`,
	} {
		c, b, _ := s.sign(body(iss))
		if c != http.StatusForbidden || !strings.Contains(b, "this cluster's own issuer") {
			t.Errorf("iss %s: %d %s, want 403 own issuer", iss, c, b)
		}
	}
	// Other spellings, duplicate and case-variant keys: refused (400,
	// 403), or signed (another issuer to the endpoint, and RBAC allows
	// every issuer here) and then never accepted by this cluster.
	for _, iss := range []string{
		`"https://kubernetes.default.svc.cluster.local/"`,
		`"HTTPS://KUBERNETES.DEFAULT.SVC.CLUSTER.LOCAL"`,
		`"https://Kubernetes.default.svc.cluster.local"`,
		`" https://kubernetes.default.svc.cluster.local"`,
		`"https://kubernetes.default.svc.cluster.local\n"`,
		`"https://kubernetes.default.svc.cluster.local\u0000"`,
		`"https://kubern\u0435tes.default.svc.cluster.local"`,
		`"https://kubernetes.default.svc.cluster.local:443"`,
		`"https://kubernetes.default.svc.cluster.local."`,
		`"https://kubernetes.default.svc.cluster.local/."`,
		`"https://kubernetes.default.svc.cluster.local#"`,
		`"https://x.example","iss":"https://kubernetes.default.svc.cluster.local"`,
		`"https://x.example","\u0069ss":"kubernetes/serviceaccount"`,
		`"https://x.example","ISS":"https://kubernetes.default.svc.cluster.local"`,
		`"https://x.example","I\u0053S":"https://kubernetes.default.svc.cluster.local"`,
		`"https://kubernetes.default.svc.cluster.local","iss":"https://x.example"`,
		`"https://kubernetes.default.svc.cluster.local","ISS":"https://x.example"`,
		`"https://kubernetes.default.svc.cluster.local","iſs":"https://x.example"`,
		`"https://kubernetes.default.svc.cluster.local","\u0069ss":"https://x.example"`,
		`"kubernetes/serviceaccount","Iss":"https://x.example"`,
	} {
		c, b, tok := s.sign(body(iss))
		switch {
		case c == http.StatusOK:
			if rtAuthenticates(t, n, tok) {
				t.Errorf("iss %s: this cluster accepts the signed token", iss)
			}
		case c != http.StatusBadRequest && c != http.StatusForbidden:
			t.Errorf("iss %s: %d %s, want 400, 403, or a token this cluster refuses", iss, c, b)
		}
	}

	// The other rules of the claims.
	for _, c := range []struct {
		claims string
		code   int
	}{
		{fmt.Sprintf(`{"iss":"https://x.example","aud":{"a":"b"},"iat":%d,"exp":%d}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":[["a"]],"iat":%d,"exp":%d}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":["a",""],"iat":%d,"exp":%d}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":null,"iat":%d,"exp":%d}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":[],"iat":%d,"exp":%d}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d}`, now), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d.5}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":1e300}`, now), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d}`, now, now+366*24*3600), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":99999999999999999999}`, now), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d}`, now-7200, now-3600), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d}}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d}{"iss":%q}`, now, now+60, rtOwnIssuer), http.StatusBadRequest},
		{fmt.Sprintf(`[{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d}]`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":["https://x.example"],"aud":"a","iat":%d,"exp":%d}`, now, now+60), http.StatusBadRequest},
		{fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d,"pad":%q}`, now, now+60, strings.Repeat("p", 16<<10)), http.StatusRequestEntityTooLarge},
	} {
		if code, b, _ := s.sign(c.claims); code != c.code {
			t.Errorf("%.120s: %d %.200s, want %d", c.claims, code, b, c.code)
		}
	}
	// Only the one encoding of the claims is signed: padding, the standard
	// alphabet, whitespace, unused trailing bits set.
	raw := fmt.Appendf(nil, `{"iss":"https://x.example","aud":"a>?~","iat":%d,"exp":%d}`, now, now+60)
	for len(raw)%3 != 1 {
		raw = append(raw[:len(raw)-1], ' ', '}')
	}
	good := base64.RawURLEncoding.EncodeToString(raw)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	trailing := good[:len(good)-1] + alphabet[last^1:last^1+1]
	if b, err := base64.RawURLEncoding.DecodeString(trailing); err != nil || !bytes.Equal(b, raw) {
		t.Fatalf("the trailing-bits variant decodes to %q (%v)", b, err)
	}
	std := base64.RawStdEncoding.EncodeToString(raw)
	if std == good {
		t.Fatal("the claims need a byte the two alphabets encode apart")
	}
	for _, seg := range []string{base64.URLEncoding.EncodeToString(raw), std, good + "\n", good + "\r\n", " " + good, trailing} {
		if code, b, _ := s.signSegment(seg); code == http.StatusOK {
			t.Errorf("segment %q: signed, want a refusal (%s)", seg, b)
		}
	}
	if code, b, _ := s.signSegment(good); code != http.StatusOK {
		t.Fatalf("the canonical segment: %d %s", code, b)
	}
	// Other shapes of the body.
	for _, b := range []string{`{"claims":"` + good + `","extra":1}`, `{"claims":["` + good + `"]}`, `"` + good + `"`, ``} {
		r := do(t, s.hc, http.MethodPost, n.url()+"/externaljwt/v1alpha1/sign", map[string]string{"Content-Type": "application/json"}, []byte(b))
		if r.code != http.StatusBadRequest {
			t.Errorf("body %.60s: %d %s, want 400", b, r.code, r.body)
		}
	}

	// A different user's grant: cluster-admin bound in a namespace gives
	// no non-resource path and no cluster-scoped sign.
	n.mustKubectl("create", "namespace", "rt-team")
	n.mustKubectl("create", "rolebinding", "rt-team-admin", "--clusterrole=cluster-admin", "--user=rt-team-admin", "--namespace=rt-team")
	ns := rtNewSigner(t, n, n.userConfig(t, "rt-team-admin"))
	if c, b, _ := ns.sign(fmt.Sprintf(`{"iss":"https://x.example","aud":"a","iat":%d,"exp":%d}`, now, now+60)); c != http.StatusForbidden {
		t.Errorf("a namespace's cluster-admin: %d %s, want 403", c, b)
	}
	// No credentials: 401, whatever the body.
	r := do(t, n.anonClient(), http.MethodPost, n.url()+"/externaljwt/v1alpha1/sign", map[string]string{"Content-Type": "application/json"}, []byte(`{"claims":"`+good+`"}`))
	wantStatus(t, r, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")

	// Nothing of the claims or the signatures in the audit log (at
	// RequestResponse) or the node's log.
	marker := fmt.Sprintf(`{"iss":"https://x.example","aud":"a","sub":"rt-audit-marker","iat":%d,"exp":%d}`, now, now+60)
	_, _, tok := s.sign(marker)
	if tok == "" {
		t.Fatal("the marker was not signed")
	}
	parts := strings.Split(tok, ".")
	time.Sleep(500 * time.Millisecond)
	audit, _ := os.ReadFile(auditPath)
	if !strings.Contains(string(audit), "/externaljwt/v1alpha1/sign") {
		t.Fatal("the audit log records no signing request: the check below would prove nothing")
	}
	for _, secret := range []string{parts[1], parts[2], "rt-audit-marker"} {
		if strings.Contains(string(audit), secret) || strings.Contains(n.fullLog(), secret) {
			t.Errorf("%.20s... is in the audit log or the node's log", secret)
		}
	}
}

// TestRedteamFleetSignClaimsReadByRelyingParties: Go's encoding/json
// matches keys case-insensitively (and folds ſ to s, K to k) and keeps the
// last; a relying party that matches keys exactly (go-jose's JSON,
// JavaScript's, Python's, Java's: what docs/OPERATIONS.md points at the
// public discovery documents) would read another issuer, audience or
// expiry than RBAC and the lifetime rule checked. With sign on
// issuers/<its issuer> and audiences/vault only, the signer sends
// {"iss":<this cluster's issuer>,"ISS":<its issuer>,...} and the like:
// refused, or signed only if go-jose reads what was checked. (Against
// 09bb26b the endpoint signed them, and go-jose verified a token of this
// cluster's own issuer.)
func TestRedteamFleetSignClaimsReadByRelyingParties(t *testing.T) {
	n := startNode(t)
	n.trustplaneOnly(t, "trustplane's signing endpoint")
	const issuer = "https://ref.example"
	rtApply(t, n, externalSignerRBAC("ref-signer", issuer))
	s := rtNewSigner(t, n, n.userConfig(t, "ref-signer"))
	now := time.Now().Unix()
	waitFor(t, 10*time.Second, "RBAC to allow signing", func() bool {
		c, _, _ := s.sign(fmt.Sprintf(`{"iss":%q,"aud":"vault","iat":%d,"exp":%d}`, issuer, now, now+60))
		return c == http.StatusOK
	})
	set := rtJWKS(t, n)
	const sub = `"sub":"system:serviceaccount:kube-system:rt-victim"`
	for _, c := range []string{
		fmt.Sprintf(`{"iss":%q,"ISS":%q,"aud":"vault",%s,"iat":%d,"exp":%d}`, rtOwnIssuer, issuer, sub, now, now+600),
		fmt.Sprintf(`{"iss":%q,"iſs":%q,"aud":"vault",%s,"iat":%d,"exp":%d}`, rtOwnIssuer, issuer, sub, now, now+600),
		fmt.Sprintf(`{"iss":%q,"aud":["sts.amazonaws.com"],"Aud":"vault",%s,"iat":%d,"exp":%d}`, issuer, sub, now, now+600),
		fmt.Sprintf(`{"iss":%q,"aud":"vault",%s,"iat":%d,"exp":%d,"EXP":%d}`, issuer, sub, now, now+100*365*24*3600, now+600),
	} {
		code, b, tok := s.sign(c)
		if code == http.StatusOK {
			cl, err := rtGoJose(t, tok, set)
			switch {
			case err != nil:
				continue // go-jose refuses it: harmless to it
			case cl.Issuer != issuer:
				t.Errorf("%s: signed; go-jose reads iss %q", c, cl.Issuer)
			case len(cl.Audience) != 1 || cl.Audience[0] != "vault":
				t.Errorf("%s: signed; go-jose reads aud %v", c, cl.Audience)
			case cl.Expiry == nil:
				t.Errorf("%s: signed; go-jose reads no exp", c)
			case cl.Expiry.Time().After(time.Unix(now+3600, 0)):
				t.Errorf("%s: signed; go-jose reads exp %v", c, cl.Expiry.Time())
			}
			continue
		}
		if code != http.StatusBadRequest && code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 400 or 403", c, code, b)
		}
	}
}

// TestRedteamFleetSignLifetimeOverflow: iat = -2^62-1 and exp = 2^62
// overflow exp - iat in int64 to a negative lifetime. Refused, or at least
// never signed into a token valid a century from now. (Against 09bb26b it
// passed the bound, whatever --service-account-max-token-expiration said,
// and go-jose's validation, kube's, accepted the token until the year 146
// billion.)
func TestRedteamFleetSignLifetimeOverflow(t *testing.T) {
	n := startNode(t, "--service-account-max-token-expiration", "1h")
	n.trustplaneOnly(t, "trustplane's signing endpoint")
	const issuer = "https://ref.example"
	rtApply(t, n, externalSignerRBAC("ref-signer", issuer))
	s := rtNewSigner(t, n, n.userConfig(t, "ref-signer"))
	now := time.Now().Unix()
	waitFor(t, 10*time.Second, "RBAC to allow signing", func() bool {
		c, _, _ := s.sign(fmt.Sprintf(`{"iss":%q,"aud":"vault","iat":%d,"exp":%d}`, issuer, now, now+60))
		return c == http.StatusOK
	})
	set := rtJWKS(t, n)
	for _, c := range []string{
		fmt.Sprintf(`{"iss":%q,"aud":"vault","iat":-4611686018427387905,"exp":4611686018427387904}`, issuer),
		fmt.Sprintf(`{"iss":%q,"aud":"vault","iat":-9223372036854775808,"exp":%d}`, issuer, now+600),
	} {
		code, b, tok := s.sign(c)
		if code == http.StatusOK {
			cl, err := rtGoJose(t, tok, set)
			if err == nil && cl.ValidateWithLeeway(jwt.Expected{Issuer: issuer, Time: time.Now().AddDate(100, 0, 0)}, 0) == nil {
				t.Errorf("%s: signed, and valid a century from now (exp %v)", c, cl.Expiry.Time())
			}
			continue
		}
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c, code, b)
		}
	}
}

// rtFederatedSelf starts a node that federates issuer B, a kube-apiserver
// signing through trustplane's external signer, so that B's key set is the
// node's own (B's /keys proxies the node's /openid/v1/jwks).
func rtFederatedSelf(t *testing.T, args ...string) (*node, *rtIssuer) {
	t.Helper()
	b := rtStartIssuer(t)
	var target atomic.Pointer[node]
	b.proxy.Store(func() []byte {
		n := target.Load()
		if n == nil {
			return []byte(`{"keys":[]}`)
		}
		return do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil).body
	})
	b.mode.Store("proxy")
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	if err := os.WriteFile(file, []byte(rtAuthConfig(false, map[string]*rtIssuer{"b": b})), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, append([]string{"--authentication-config", file}, args...)...)
	n.trustplaneOnly(t, "trustplane's signing endpoint")
	target.Store(n)
	return n, b
}

// TestRedteamFleetSignLifetimeFromFutureIat: the lifetime rule bounds
// exp - iat, and iat is the signer's to choose. With
// --service-account-max-token-expiration 1h, B's signer asks for iat =
// now + 10 years, exp = iat + 10 minutes: refused (400), or not accepted
// now. (Against 09bb26b it was signed, and trustplane, federating B,
// accepted it at once: kube's JWT authenticator, go-oidc, does not check
// iat; a ten-year token under a one-hour maximum.)
func TestRedteamFleetSignLifetimeFromFutureIat(t *testing.T) {
	n, b := rtFederatedSelf(t, "--service-account-max-token-expiration", "1h")
	rtApply(t, n, rtSignerRBAC("rt-b-signer", "rt-b", []string{b.url()}, []string{"trustplane"}))
	s := rtNewSigner(t, n, n.userConfig(t, "rt-b"))
	now := time.Now().Unix()
	waitFor(t, 20*time.Second, "B's signer to mint a token trustplane accepts", func() bool {
		code, _, tok := s.sign(fmt.Sprintf(`{"iss":%q,"aud":"trustplane","sub":"control","iat":%d,"exp":%d}`, b.url(), now, now+600))
		return code == http.StatusOK && rtReview(t, n, tok).Authenticated
	})
	far := now + 10*365*24*3600
	code, body, tok := s.sign(fmt.Sprintf(`{"iss":%q,"aud":"trustplane","sub":"future","iat":%d,"exp":%d}`, b.url(), far, far+600))
	switch {
	case code == http.StatusOK:
		if st := rtReview(t, n, tok); st.Authenticated {
			t.Errorf("a token with iat and exp ten years ahead is signed and accepted now as %q", st.User.Username)
		}
	case code != http.StatusBadRequest:
		t.Errorf("iat ten years ahead: %d %s, want 400", code, body)
	}
}

// rtIssuer is a federated issuer whose answers the test controls.
type rtIssuer struct {
	srv     *httptest.Server
	key     *rsa.PrivateKey
	mode    atomic.Value // string: "keys", "redirect", "gzip", "drip", "loop", "proxy"
	target  atomic.Value // string: the redirect's target
	proxy   atomic.Value // func() []byte: the key set in "proxy" mode
	jwksURI atomic.Value // string: the discovery document's jwks_uri, when set
	keyHits atomic.Int64
}

// rtGzipBomb is gzip of a 64 MiB key set.
func rtGzipBomb() []byte {
	var b bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	gz.Write([]byte(`{"keys":[{"kty":"RSA","e":"AQAB","n":"`))
	chunk := bytes.Repeat([]byte("A"), 1<<20)
	for range 64 {
		gz.Write(chunk)
	}
	gz.Write([]byte(`"}]}`))
	gz.Close()
	return b.Bytes()
}

func rtStartIssuer(t *testing.T) *rtIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	i := &rtIssuer{key: key}
	i.mode.Store("keys")
	var bomb []byte
	stop := make(chan struct{})
	i.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			uri, _ := i.jwksURI.Load().(string)
			if uri == "" {
				uri = i.srv.URL + "/keys"
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"issuer": i.srv.URL, "jwks_uri": uri,
				"id_token_signing_alg_values_supported": []string{"RS256", "ES256"}})
		case "/keys":
			i.keyHits.Add(1)
			switch i.mode.Load().(string) {
			case "redirect":
				http.Redirect(w, r, i.target.Load().(string), http.StatusFound)
			case "loop":
				http.Redirect(w, r, "/keys", http.StatusFound)
			case "gzip":
				if bomb == nil {
					bomb = rtGzipBomb()
				}
				w.Header().Set("Content-Encoding", "gzip")
				w.Header().Set("Content-Type", "application/json")
				w.Write(bomb)
			case "drip":
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"keys":[`))
				for range 600 { // at most a minute
					w.(http.Flusher).Flush()
					select {
					case <-stop:
						return
					case <-r.Context().Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
					w.Write([]byte(" "))
				}
			case "proxy":
				w.Header().Set("Content-Type", "application/json")
				w.Write(i.proxy.Load().(func() []byte)())
			default:
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &i.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(stop); i.srv.CloseClientConnections(); i.srv.Close() })
	return i
}

func (i *rtIssuer) url() string { return i.srv.URL }

func (i *rtIssuer) caPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.srv.Certificate().Raw}))
}

// token is a token of the issuer's own key (kid), claims over the
// defaults.
func (i *rtIssuer) token(t *testing.T, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: i.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	all := map[string]any{"iss": i.url(), "aud": "trustplane", "sub": "rt", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	tok, err := jwt.Signed(s).Claims(all).CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rtAuthConfig federates issuers (prefix:sub), with the discovery
// documents public when anonymous.
func rtAuthConfig(anonymous bool, issuers map[string]*rtIssuer) string {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n")
	if anonymous {
		b.WriteString("anonymous:\n  enabled: true\n  conditions:\n  - path: /.well-known/openid-configuration\n  - path: /openid/v1/jwks\n")
	}
	b.WriteString("jwt:\n")
	for prefix, i := range issuers {
		ca := "      " + strings.ReplaceAll(strings.TrimSpace(i.caPEM()), "\n", "\n      ")
		fmt.Fprintf(&b, "- issuer:\n    url: %s\n    audiences: [trustplane]\n    certificateAuthority: |\n%s\n  claimMappings:\n    username:\n      expression: \"'%s:' + claims.sub\"\n", i.url(), ca, prefix)
	}
	return b.String()
}

// rtReview is the admin's TokenReview of token.
func rtReview(t *testing.T, n *node, token string) authenticationv1.TokenReviewStatus {
	t.Helper()
	tr, err := n.clientset().AuthenticationV1().TokenReviews().Create(context.Background(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status
}

// TestRedteamFleetFederatedIssuerReachesInside: whoever controls a
// federated issuer's answers redirects its key set to a plain-HTTP
// address inside the node's network (a loopback server standing for a
// cloud metadata endpoint), and sends, without credentials, tokens naming
// the issuer with unknown kids, each of which makes the node fetch the key
// set again. The inside address is never fetched, and TokenReview's
// status.error quotes nothing it answered. (Against 09bb26b the node
// followed the redirect on every such request, the certificateAuthority
// pinning nothing once it left TLS, and go-oidc quoted the answer's body
// in the error TokenReview returns to whoever may create reviews.)
func TestRedteamFleetFederatedIssuerReachesInside(t *testing.T) {
	const canary = "rt-internal-metadata-canary"
	var inside atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		w.Write([]byte(canary))
	}))
	t.Cleanup(internal.Close)
	iss := rtStartIssuer(t)
	iss.target.Store(internal.URL + "/latest/meta-data/iam/security-credentials/node")
	iss.mode.Store("redirect")
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	os.WriteFile(file, []byte(rtAuthConfig(false, map[string]*rtIssuer{"fed": iss})), 0o600)
	n := startNode(t, "--authentication-config", file)
	n.trustplaneOnly(t, "a node started with --authentication-config")
	var st authenticationv1.TokenReviewStatus
	waitFor(t, 20*time.Second, "the issuer to initialise", func() bool {
		st = rtReview(t, n, iss.token(t, "k1", nil))
		return !strings.Contains(st.Error, "not initialized")
	})
	if strings.Contains(st.Error, canary) {
		t.Errorf("TokenReview's status.error quotes the inside answer: %s", st.Error)
	}
	// Unauthenticated: tokens naming the issuer with unknown kids, no
	// valid signature needed.
	before := inside.Load()
	for k := range 10 {
		tok := iss.token(t, fmt.Sprintf("unknown-%d", k), nil)
		do(t, n.anonClient(), http.MethodGet, n.url()+"/api", map[string]string{"Authorization": "Bearer " + tok}, nil)
	}
	if got := inside.Load(); got > 0 {
		t.Errorf("the node fetched the plain-HTTP inside address %d times (%d by 10 unauthenticated requests)", got, got-before)
	}
}

// TestRedteamFleetFederatedJWKSURIQuotedInReview: the discovery
// document's jwks_uri may name another host (kube allows it: Google's
// keys are not at its issuer's host), and the fetch rules of 854377c
// (https only, redirects within their origin, non-JSON answers quoted
// nowhere) let a JSON answer through to go-oidc, which quotes the body of
// any JSON that does not decode as a key set in its error ("oidc: failed
// to decode keys: ... <body>"), and TokenReview returns it in
// status.error. Whoever controls a federated issuer's discovery document
// names an https address inside the node's network whose certificate the
// issuer's certificateAuthority (or, without one, the host's roots)
// trusts — here another loopback server: httptest's servers share one
// certificate — and reads back its JSON answers (an array, a string, an
// object whose "keys" is not a key set) through any TokenReview.
func TestRedteamFleetFederatedJWKSURIQuotedInReview(t *testing.T) {
	const canary = "rt-https-inside-canary"
	var answer atomic.Value
	answer.Store("")
	var inside atomic.Int64
	internal := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(answer.Load().(string)))
	}))
	t.Cleanup(internal.Close)
	iss := rtStartIssuer(t)
	iss.jwksURI.Store(internal.URL + "/computeMetadata/v1/")
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	os.WriteFile(file, []byte(rtAuthConfig(false, map[string]*rtIssuer{"fed": iss})), 0o600)
	n := startNode(t, "--authentication-config", file)
	n.trustplaneOnly(t, "a node started with --authentication-config")
	waitFor(t, 20*time.Second, "the issuer to initialise", func() bool {
		return !strings.Contains(rtReview(t, n, iss.token(t, "k0", nil)).Error, "not initialized")
	})
	for k, body := range []string{
		`["` + canary + `"]`,
		`"` + canary + `"`,
		`{"keys":"` + canary + `"}`,
		`{"keys":[{"kty":"` + canary + `"}]}`,
		`{"keys":[{"kty":"RSA","n":"` + canary + `"}]}`,
	} {
		answer.Store(body)
		// Past the rate limit's burst of fetches for this issuer.
		time.Sleep(250 * time.Millisecond)
		if st := rtReview(t, n, iss.token(t, fmt.Sprintf("k%d", k+1), nil)); strings.Contains(st.Error, canary) {
			t.Errorf("the inside answer %s is quoted in TokenReview's status.error: %.300s", body, st.Error)
		}
	}
}

// TestRedteamFleetHostileIssuerAnswers: a federated issuer's key set as a
// gzip bomb (64 MiB from 64 KiB: Go's transport decompresses before the
// limit counts, so the limit is on decompressed bytes), as a redirect
// loop, and as a slow drip under the timeout. Each fetch ends within the
// bounds with an error naming no body; the node stays ready and serves;
// the issuer's tokens authenticate once it answers well.
func TestRedteamFleetHostileIssuerAnswers(t *testing.T) {
	iss := rtStartIssuer(t)
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	os.WriteFile(file, []byte(rtAuthConfig(false, map[string]*rtIssuer{"fed": iss})), 0o600)
	n := startNode(t, "--authentication-config", file, "--authentication-issuer-timeout", "2s", "--authentication-issuer-max-bytes", "256Ki")
	n.trustplaneOnly(t, "a node started with --authentication-config")
	tok := iss.token(t, "k1", nil)
	waitFor(t, 20*time.Second, "the issuer to initialise", func() bool {
		return !strings.Contains(rtReview(t, n, tok).Error, "not initialized")
	})
	for _, c := range []struct {
		mode string
		want []string // one of
	}{
		{"gzip", []string{"exceeds the size limit"}},
		{"loop", []string{"redirects"}},
		{"drip", []string{"Client.Timeout", "deadline exceeded"}},
	} {
		iss.mode.Store(c.mode)
		start := time.Now()
		st := rtReview(t, n, iss.token(t, "k-"+c.mode, nil))
		found := false
		for _, w := range c.want {
			found = found || strings.Contains(st.Error, w)
		}
		if st.Authenticated || !found {
			t.Errorf("%s: %+v, want an error with one of %q", c.mode, st, c.want)
		}
		// A bound, not a timing assertion.
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%s: the review took %v", c.mode, d)
		}
		if len(st.Error) > 4096 {
			t.Errorf("%s: an error of %d bytes", c.mode, len(st.Error))
		}
		n.mustBeReady(t)
	}
	iss.mode.Store("keys")
	if st := rtReview(t, n, tok); !st.Authenticated || st.User.Username != "fed:rt" {
		t.Fatalf("a good token once the issuer answers: %+v", st)
	}
}

// TestRedteamFleetSignCannotMintFederatedIssuer: trustplane federates
// issuer B, a kube-apiserver that signs through trustplane's external
// signer, so that B's key set is trustplane's own. A signer granted
// issuer A only cannot mint B's tokens: B is refused (403), and a
// case-variant "iss" that the endpoint reads as A is read as A by the
// federated authenticator too (401). The control: the signer granted B
// mints tokens trustplane accepts as B's users, which is what sign on
// issuers/B means.
func TestRedteamFleetSignCannotMintFederatedIssuer(t *testing.T) {
	n, b := rtFederatedSelf(t)
	const issuerA = "https://cluster-a.example"
	rtApply(t, n, rtSignerRBAC("rt-a-signer", "rt-a", []string{issuerA}, []string{"trustplane", issuerA}))
	rtApply(t, n, rtSignerRBAC("rt-b-signer", "rt-b", []string{b.url()}, []string{"trustplane"}))
	sa, sb := rtNewSigner(t, n, n.userConfig(t, "rt-a")), rtNewSigner(t, n, n.userConfig(t, "rt-b"))
	now := time.Now().Unix()
	claims := func(iss string) string {
		return fmt.Sprintf(`{"iss":%s,"aud":"trustplane","sub":"build-1","iat":%d,"exp":%d}`, iss, now, now+600)
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }

	var control string
	waitFor(t, 20*time.Second, "B's signer to mint a token trustplane accepts", func() bool {
		code, _, tok := sb.sign(claims(q(b.url())))
		if code != http.StatusOK {
			return false
		}
		control = tok
		return rtReview(t, n, tok).Authenticated
	})
	if st := rtReview(t, n, control); st.User.Username != "b:build-1" {
		t.Fatalf("the control token: %+v", st.User)
	}

	if code, body, _ := sa.sign(claims(q(b.url()))); code != http.StatusForbidden || !strings.Contains(body, "may not sign for this issuer") {
		t.Errorf("A's signer for B: %d %s, want 403", code, body)
	}
	for _, iss := range []string{
		q(b.url()) + `,"ISS":` + q(issuerA),
		q(b.url()) + `,"iſs":` + q(issuerA),
		q(b.url()) + `,"iss":` + q(issuerA),
	} {
		code, body, tok := sa.sign(claims(iss))
		if code != http.StatusOK {
			if code != http.StatusBadRequest && code != http.StatusForbidden {
				t.Errorf("iss %s: %d %s, want 400, 403, or a token trustplane refuses", iss, code, body)
			}
			continue
		}
		if rtAuthenticates(t, n, tok) {
			t.Errorf("iss %s: A's signer minted a token trustplane accepts as B's", iss)
		}
	}
}

// rtRaw sends one raw HTTP/1.1 request over TLS and returns the status
// line.
func rtRaw(t *testing.T, n *node, req string) string {
	t.Helper()
	c, err := tls.Dial("tcp", n.listen, &tls.Config{RootCAs: n.caPool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// TestRedteamFleetAnonymousRequestForms: with the discovery documents
// public, no form of request line or header reaches anything else
// anonymously: absolute-form URIs, CONNECT, OPTIONS, HEAD, fragments,
// matrix parameters, encoded '?', tabs, encoded dots, a 70 KB path,
// impersonation headers, X-Remote-* headers, a second Authorization
// header, HTTP/2 :path; and nothing changes.
func TestRedteamFleetAnonymousRequestForms(t *testing.T) {
	iss := startIssuer(t)
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	os.WriteFile(file, []byte(fleetAuthConfig(iss, "ci")), 0o600)
	n := startNode(t, "--authentication-config", file)
	n.trustplaneOnly(t, "a node started with --authentication-config")
	n.mustKubectl("create", "clusterrolebinding", "oidc-discovery-public", "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
	waitFor(t, 10*time.Second, "the binding to apply", func() bool {
		return do(t, n.anonClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil).code == http.StatusOK
	})
	before := n.snapshot(t, "serviceaccounts", "secrets", "configmaps", "namespaces")
	h := n.listen
	req := func(line string, headers ...string) string {
		return line + "\r\nHost: " + h + "\r\n" + strings.Join(append(headers, ""), "\r\n") + "\r\n"
	}
	for _, c := range []struct {
		req  string
		want string
	}{
		// The named path in absolute form is the named path: served.
		{req("GET https://" + h + "/openid/v1/jwks HTTP/1.1"), "200"},
		{req("GET https://elsewhere.example/openid/v1/jwks HTTP/1.1"), "200"},
		{req("GET https://" + h + "/api/v1/namespaces HTTP/1.1"), "401"},
		{req("GET https://" + h + "/api/v1/namespaces/kube-system/secrets HTTP/1.1"), "401"},
		{req("GET http://x/openid/v1/jwks/../../../api/v1/secrets HTTP/1.1"), "401"},
		{req("POST https://"+h+"/externaljwt/v1alpha1/sign HTTP/1.1", "Content-Length: 2", "", "{}"), "401"},
		{req("CONNECT " + h + " HTTP/1.1"), "401"},
		{req("CONNECT /api/v1/namespaces HTTP/1.1"), "401"},
		{req("CONNECT /openid/v1/jwks HTTP/1.1"), "403"},
		{req("OPTIONS /openid/v1/jwks HTTP/1.1"), "403"},
		{req("HEAD /openid/v1/jwks HTTP/1.1"), "403"},
		{req("PROPFIND /openid/v1/jwks HTTP/1.1"), "403"},
		{req("GET /openid/v1/jwks#/../../api HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks;/api/v1/namespaces HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks%3F/../../api/v1/namespaces HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks%23 HTTP/1.1"), "401"},
		{req("GET /%2e%2e/openid/v1/jwks HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks%2F..%2F..%2Fapi HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks%252F HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks\t/api HTTP/1.1"), "400"},
		{req("GET /" + strings.Repeat("a", 70000) + " HTTP/1.1"), "401"},
		{req("GET /openid/v1/jwks HTTP/1.1", "Impersonate-User: trustplane-admin"), "403"},
		{req("GET /openid/v1/jwks HTTP/1.1", "Impersonate-User: system:anonymous", "Impersonate-Group: system:masters"), "403"},
		{req("GET /api/v1/namespaces HTTP/1.1", "X-Remote-User: trustplane-admin", "X-Remote-Group: system:masters"), "401"},
		{req("GET /api/v1/namespaces HTTP/1.1", "Authorization: ", "Authorization: Bearer x"), "401"},
		{req("GET /openid/v1/jwks HTTP/1.1", "Authorization: Basic YTpi"), "401"},
		{req("GET /openid/v1/jwks HTTP/1.1", "Authorization: Bearer"), "401"},
		{req("GET /.well-known/openid-configuration/ HTTP/1.1"), "401"},
		{req("GET /.well-known/openid-configuration/.. HTTP/1.1"), "401"},
	} {
		first := strings.SplitN(c.req, "\r\n", 2)[0]
		got := rtRaw(t, n, c.req)
		if !strings.Contains(got, " "+c.want+" ") {
			t.Errorf("%.90q: %s, want %s", first, got, c.want)
		}
	}
	// HTTP/2: :path as given (URL.Opaque).
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: n.caPool()}}}
	for _, c := range []struct {
		path string
		want int
	}{
		{"/openid/v1/jwks", http.StatusOK}, {"/openid/v1/%6Awks", http.StatusUnauthorized},
		{"/openid/v1%2Fjwks", http.StatusUnauthorized}, {"/api/v1/namespaces", http.StatusUnauthorized},
	} {
		r, _ := http.NewRequest(http.MethodGet, n.url(), nil)
		r.URL.Opaque = c.path
		resp, err := h2.Do(r)
		if err != nil {
			t.Fatalf("h2 %s: %v", c.path, err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != c.want {
			t.Errorf("h2 %s: %d over %s, want %d over HTTP/2", c.path, resp.StatusCode, resp.Proto, c.want)
		}
	}
	sameSnapshot(t, before, n.snapshot(t, "serviceaccounts", "secrets", "configmaps", "namespaces"))
}

// TestRedteamFleetAnonymousOnEveryNode: on a three-node cluster, every
// node (followers and leader) makes the same anonymous decisions, with
// nothing forwarded that changes them: the discovery documents public,
// writes to them 403, every other path and the rotation actions 401;
// the signing endpoint, served by each node without forwarding, refuses
// the own issuer on every node.
func TestRedteamFleetAnonymousOnEveryNode(t *testing.T) {
	iss := startIssuer(t)
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	os.WriteFile(file, []byte(fleetAuthConfig(iss, "ci")), 0o600)
	nodes := startCluster(t, 3, "--authentication-config", file)
	nodes[0].mustKubectl("create", "clusterrolebinding", "oidc-discovery-public", "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
	rtApply(t, nodes[0], rtSignerRBAC("rt-any-signer", "rt-any", nil, nil))
	before := nodes[0].snapshot(t, "serviceaccounts", "secrets", "namespaces")
	now := time.Now().Unix()
	for _, n := range nodes {
		anon := n.anonClient()
		waitFor(t, 10*time.Second, "the binding on "+n.name, func() bool {
			return do(t, anon, http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil).code == http.StatusOK
		})
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if r := do(t, anon, m, n.url()+"/openid/v1/jwks", nil, []byte(`{}`)); r.code != http.StatusForbidden {
				t.Errorf("%s: %s jwks: %d, want 403", n.name, m, r.code)
			}
		}
		for _, c := range []struct{ method, path string }{
			{http.MethodPost, "/api/v1/namespaces"},
			{http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/default/token"},
			{http.MethodPost, "/debug/trustplane/rotate/signing-key/start"},
			{http.MethodDelete, "/debug/trustplane/members/n2"},
			{http.MethodPost, "/externaljwt/v1alpha1/sign"},
		} {
			if r := do(t, anon, c.method, n.url()+c.path, map[string]string{"Content-Type": "application/json"}, []byte(`{"metadata":{"name":"rt"}}`)); r.code != http.StatusUnauthorized {
				t.Errorf("%s: anonymous %s %s: %d, want 401", n.name, c.method, c.path, r.code)
			}
		}
		s := rtNewSigner(t, n, n.userConfig(t, "rt-any"))
		waitFor(t, 10*time.Second, "RBAC on "+n.name, func() bool {
			c, _, _ := s.sign(fmt.Sprintf(`{"iss":"https://ok.example","aud":"x","iat":%d,"exp":%d}`, now, now+60))
			return c == http.StatusOK
		})
		if c, b, _ := s.sign(fmt.Sprintf(`{"iss":%q,"aud":%q,"iat":%d,"exp":%d}`, rtOwnIssuer, rtOwnIssuer, now, now+60)); c != http.StatusForbidden {
			t.Errorf("%s: own issuer: %d %s, want 403", n.name, c, b)
		}
	}
	sameSnapshot(t, before, nodes[0].snapshot(t, "serviceaccounts", "secrets", "namespaces"))
}

// rtTokenKubeconfig writes a kubeconfig for server (trusting caPEM) with
// a bearer token.
func rtTokenKubeconfig(t *testing.T, server string, caPEM []byte, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRedteamFleetExternalSigner: the sidecar neither replaces a file nor
// follows a symlink at its socket path (a local user's plant); against a
// hostile trustplane (a server at its kubeconfig's address) it passes on
// no private key the key set carries, reads at most 1 MiB of any answer,
// answers a non-JSON 200 with an error, and never quotes its own bearer
// token in an error.
func TestRedteamFleetExternalSigner(t *testing.T) {
	const secretToken = "rt-sidecar-bearer-token-5d1e"
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	privJWK, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: priv, KeyID: "leaked", Algorithm: "RS256", Use: "sig"}}})
	var mode atomic.Value
	mode.Store("private")
	fake := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "private":
			w.Write(privJWK)
		case "huge":
			w.Write([]byte(`{"keys":[{"kty":"RSA","kid":"x","e":"AQAB","n":"`))
			chunk := bytes.Repeat([]byte("A"), 64<<10)
			for range 64 { // 4 MiB
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			w.Write([]byte(`"}]}`))
		case "garbage":
			w.Write([]byte("<html>not JSON</html>"))
		case "refuse":
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nope","code":403}`))
		}
	}))
	t.Cleanup(fake.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fake.Certificate().Raw})
	kc := rtTokenKubeconfig(t, fake.URL, caPEM, secretToken)

	// A plant at the socket path: a file, a symlink to a file.
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		plant func(path string)
	}{
		{"a regular file", func(p string) { os.WriteFile(p, []byte("keep"), 0o644) }},
		{"a symlink", func(p string) {
			target := filepath.Join(dir, "target")
			os.WriteFile(target, []byte("keep"), 0o644)
			os.Symlink(target, p)
		}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".sock")
		c.plant(path)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, binPath, "external-signer", "--socket", path, "--kubeconfig", kc).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "exists and is not a socket") {
			t.Errorf("%s at the socket path: %v %s, want a refusal", c.name, err, out)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "keep" {
			t.Errorf("%s at the socket path was changed: %q %v", c.name, b, err)
		}
	}

	client, sock := startExternalSigner(t, kc)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
	ctx := context.Background()
	keys, err := client.FetchKeys(ctx, &v1alpha1.FetchKeysRequest{})
	if err == nil {
		for _, k := range keys.Keys {
			if bytes.Contains(k.Key, priv.D.Bytes()) {
				t.Fatal("FetchKeys passed on a private key")
			}
		}
		t.Errorf("FetchKeys with a private key in the set: %v, want an error", keys)
	}
	mode.Store("huge")
	if _, err := client.FetchKeys(ctx, &v1alpha1.FetchKeysRequest{}); status.Code(err) != codes.Internal || len(err.Error()) > 4096 {
		t.Errorf("FetchKeys of a 4 MiB answer: %.300v, want a short Internal error", err)
	}
	mode.Store("garbage")
	if _, err := client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: "e30"}); status.Code(err) != codes.Internal {
		t.Errorf("Sign with a non-JSON 200: %v, want Internal", err)
	}
	mode.Store("refuse")
	_, err = client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: "e30"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Sign refused: %v, want PermissionDenied", err)
	}
	for _, m := range []string{"private", "garbage", "refuse"} {
		mode.Store(m)
		_, e1 := client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: "e30"})
		_, e2 := client.FetchKeys(ctx, &v1alpha1.FetchKeysRequest{})
		for _, e := range []error{e1, e2} {
			if e != nil && strings.Contains(e.Error(), secretToken) {
				t.Errorf("%s: an error quotes the sidecar's token: %v", m, e)
			}
		}
	}
}
