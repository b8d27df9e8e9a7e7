package authnconfig

import (
	"compress/gzip"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	authnmetrics "k8s.io/apiserver/pkg/server/options/authenticationconfig/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/trustplane/trustplane/internal/oidctest"
	"github.com/trustplane/trustplane/internal/testlog"
)

const ownIssuer = "https://kubernetes.default.svc.cluster.local"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newIssuer(t *testing.T) *oidctest.Issuer {
	t.Helper()
	i, err := oidctest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(i.Close)
	return i
}

// jwtConfig is an AuthenticationConfiguration with one issuer per entry,
// each with claim mappings, a claim validation rule and a user validation
// rule in CEL.
func jwtConfig(issuers ...*oidctest.Issuer) string {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\njwt:\n")
	for n, i := range issuers {
		fmt.Fprintf(&b, `- issuer:
    url: %s
    audiences: [fleet, other-%d]
    audienceMatchPolicy: MatchAny
    certificateAuthority: |
%s
  claimValidationRules:
  - expression: "claims.env == 'prod'"
    message: only production workloads
  claimMappings:
    username:
      expression: "'fleet-%d:' + claims.sub"
    groups:
      expression: "has(claims.teams) ? claims.teams : []"
    extra:
    - key: example.com/cluster
      valueExpression: "claims.cluster"
  userValidationRules:
  - expression: "!user.username.contains('root')"
    message: no root
`, i.URL, n, indent(i.CAPEM, "      "), n)
	}
	return b.String()
}

func indent(s, p string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return p + strings.Join(lines, "\n"+p)
}

// testContext ends with the test, and with it the issuers' background
// fetches.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

func writeFile(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "authn.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func options(file string) Options {
	return Options{File: file, ServiceAccountIssuers: []string{ownIssuer}, APIAudiences: authenticator.Audiences{ownIssuer}, FetchTimeout: 2 * time.Second, MaxFetchBytes: 1 << 20, ServerID: "n1"}
}

// eventually polls f every 50ms for at most 30s (a bound, not a timing
// assertion: the issuers initialise in the background).
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func authenticate(a authenticator.Token, token string) (*authenticator.Response, error) {
	ctx := authenticator.WithAudiences(context.Background(), authenticator.Audiences{ownIssuer})
	resp, ok, err := a.AuthenticateToken(ctx, token)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("not authenticated")
	}
	return resp, nil
}

func TestLoadRefuses(t *testing.T) {
	i := newIssuer(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		file string
		oidc OIDCFlags
		want string
	}{
		{name: "file and oidc flags", file: jwtConfig(i), oidc: OIDCFlags{IssuerURL: i.URL, ClientID: "x", Set: true}, want: "authentication-config file and oidc-* flags are mutually exclusive"},
		{name: "oidc flags without client id", oidc: OIDCFlags{IssuerURL: i.URL, Set: true}, want: "oidc-issuer-url and oidc-client-id must be specified together"},
		{name: "empty file", file: "", want: "empty config data"},
		{name: "unknown field", file: "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\nnope: 1\n", want: `unknown field "nope"`},
		{name: "wrong kind", file: "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthorizationConfiguration\n", want: "expected AuthenticationConfiguration"},
		{name: "own issuer", file: strings.Replace(jwtConfig(i), i.URL, ownIssuer, 1), want: "jwt[0].issuer.url: Invalid value: \"" + ownIssuer + "\": URL must not overlap with disallowed issuers"},
		{name: "http issuer", file: strings.Replace(jwtConfig(i), i.URL, "http://example.com", 1), want: "URL scheme must be https"},
		{name: "bad CEL", file: strings.Replace(jwtConfig(i), "claims.env == 'prod'", "claims.env ==", 1), want: "compilation failed"},
		{name: "rule not boolean", file: strings.Replace(jwtConfig(i), "claims.env == 'prod'", "claims.env", 1), want: "must evaluate to bool"},
		{name: "anonymous conditions while disabled", file: "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: false\n  conditions:\n  - path: /livez\n", want: "enabled should be set to true when conditions are defined"},
		{name: "duplicate issuer", file: jwtConfig(i, i), want: "jwt[1].issuer.url: Duplicate value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := options("")
			if c.file != "" || c.name == "empty file" {
				o.File = writeFile(t, dir, c.file)
			}
			o.OIDC = c.oidc
			_, err := Load(context.Background(), o, quiet)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestLoadNone(t *testing.T) {
	a, err := Load(context.Background(), options(""), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != nil || a.Anonymous != nil {
		t.Fatalf("no file and no flags configured %+v", a)
	}
}

func TestAnonymousSection(t *testing.T) {
	f := writeFile(t, t.TempDir(), "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: true\n  conditions:\n  - path: /.well-known/openid-configuration\n  - path: /openid/v1/jwks\n")
	a, err := Load(context.Background(), options(f), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Anonymous.Enabled || len(a.Anonymous.Conditions) != 2 || a.Anonymous.Conditions[1].Path != "/openid/v1/jwks" {
		t.Fatalf("anonymous = %+v", a.Anonymous)
	}
}

// TestFederatedIssuers authenticates tokens of two issuers through kube's
// JWT authenticator: claim mappings, claim and user validation rules,
// audiences, expiry, and another issuer's key.
func TestFederatedIssuers(t *testing.T) {
	i0, i1 := newIssuer(t), newIssuer(t)
	a, err := Load(testContext(t), options(writeFile(t, t.TempDir(), jwtConfig(i0, i1))), quiet)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := i1.Sign(oidctest.Claims{"sub": "ci-42", "aud": "fleet", "env": "prod", "teams": []string{"build"}, "cluster": "east"})
	eventually(t, "issuer 1 initialises", func() error { _, err := authenticate(a.Token, good); return err })
	resp, _ := authenticate(a.Token, good)
	if u := resp.User; u.GetName() != "fleet-1:ci-42" || strings.Join(u.GetGroups(), ",") != "build" || u.GetExtra()["example.com/cluster"][0] != "east" {
		t.Fatalf("user = %+v", u)
	}
	if !resp.Audiences.Has(ownIssuer) {
		t.Fatalf("audiences = %v, want the API audience (kube's audience-agnostic wrap)", resp.Audiences)
	}
	forged, _ := i0.Sign(oidctest.Claims{"iss": i1.URL, "sub": "x", "aud": "fleet", "env": "prod", "cluster": "e"})
	cases := []struct {
		name   string
		claims oidctest.Claims
		token  string
		want   string
	}{
		{name: "claim rule", claims: oidctest.Claims{"sub": "a", "aud": "fleet", "env": "dev", "cluster": "e"}, want: "only production workloads"},
		{name: "user rule", claims: oidctest.Claims{"sub": "root", "aud": "fleet", "env": "prod", "cluster": "e"}, want: "no root"},
		{name: "audience", claims: oidctest.Claims{"sub": "a", "aud": "elsewhere", "env": "prod", "cluster": "e"}, want: "audience"},
		{name: "expired", claims: oidctest.Claims{"sub": "a", "aud": "fleet", "env": "prod", "cluster": "e", "exp": time.Now().Add(-time.Hour).Unix()}, want: "expired"},
		{name: "other issuer's key", token: forged, want: "verify"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok := c.token
			if tok == "" {
				tok, _ = i1.Sign(c.claims)
			}
			_, err := authenticate(a.Token, tok)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestDiscoveryURL: an issuer whose name does not resolve to its server
// (kube's self-hosted case) is discovered at discoveryURL; and the legacy
// --oidc-* flags configure one issuer with kube's username prefix.
func TestDiscoveryURLAndOIDCFlags(t *testing.T) {
	i := newIssuer(t)
	i.Name = "https://ci.example.com"
	f := writeFile(t, t.TempDir(), fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://ci.example.com
    discoveryURL: %s/.well-known/openid-configuration
    audiences: [fleet]
    certificateAuthority: |
%s
  claimMappings:
    username:
      claim: sub
      prefix: "ci:"
`, i.URL, indent(i.CAPEM, "      ")))
	a, err := Load(testContext(t), options(f), quiet)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := i.Sign(oidctest.Claims{"sub": "job-1", "aud": "fleet"})
	eventually(t, "the issuer discovered at its discoveryURL", func() error { _, err := authenticate(a.Token, tok); return err })
	if resp, _ := authenticate(a.Token, tok); resp.User.GetName() != "ci:job-1" {
		t.Fatalf("user %q", resp.User.GetName())
	}

	j := newIssuer(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(caFile, []byte(j.CAPEM), 0o600)
	o := options("")
	o.OIDC = OIDCFlags{IssuerURL: j.URL, ClientID: "fleet", CAFile: caFile, UsernameClaim: "sub", GroupsClaim: "teams", GroupsPrefix: "oidc:",
		RequiredClaims: map[string]string{"env": "prod"}, Set: true}
	b, err := Load(testContext(t), o, quiet)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := j.Sign(oidctest.Claims{"sub": "job-2", "aud": "fleet", "env": "prod", "teams": []string{"build"}})
	eventually(t, "the --oidc-* issuer", func() error { _, err := authenticate(b.Token, good); return err })
	resp, _ := authenticate(b.Token, good)
	// kube's legacy rule: a claim other than email is prefixed with the
	// issuer URL and '#'.
	if u := resp.User; u.GetName() != j.URL+"#job-2" || strings.Join(u.GetGroups(), ",") != "oidc:build" {
		t.Fatalf("user %+v", u)
	}
	bad, _ := j.Sign(oidctest.Claims{"sub": "job-3", "aud": "fleet", "env": "dev"})
	if _, err := authenticate(b.Token, bad); err == nil {
		t.Fatal("a token without the required claim authenticated")
	}
}

// TestHostileIssuers: an issuer that hangs, answers garbage or a key set
// larger than the limit holds neither Load nor a request past the fetch
// bounds, and its tokens are refused.
func TestHostileIssuers(t *testing.T) {
	for _, mode := range []oidctest.Mode{oidctest.Slow, oidctest.Huge, oidctest.Garbage} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			i := newIssuer(t)
			i.SetMode(mode)
			o := options(writeFile(t, t.TempDir(), jwtConfig(i)))
			o.FetchTimeout = 500 * time.Millisecond
			a, err := Load(testContext(t), o, quiet)
			if err != nil {
				t.Fatal(err)
			}
			tok, _ := i.Sign(oidctest.Claims{"sub": "a", "aud": "fleet", "env": "prod", "cluster": "e"})
			if _, err := authenticate(a.Token, tok); err == nil {
				t.Fatal("a token of an issuer that never answered well authenticated")
			}
			// A hanging or garbled discovery document keeps the issuer
			// uninitialised (its health says why); a huge key set is
			// fetched on a token's first verification, which fails.
			want := map[oidctest.Mode]string{oidctest.Slow: "Client.Timeout", oidctest.Huge: ErrTooLarge.Error(), oidctest.Garbage: "neither JSON nor a JWT"}[mode]
			eventually(t, "the issuer's failure is reported", func() error {
				_, err := authenticate(a.Token, tok)
				if herr := a.jwt.cur.Load().health(); herr != nil {
					err = herr
				}
				if err == nil || !strings.Contains(err.Error(), want) {
					return fmt.Errorf("error %v, want %q", err, want)
				}
				return nil
			})
		})
	}
}

// TestFetchTransport: what an issuer's answers may be. The secret an
// inside address answers must never reach an error (TokenReview returns
// errors to its callers).
func TestFetchTransport(t *testing.T) {
	const secret = "inside-secret-canary"
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(secret)) }))
	defer inside.Close()
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"keys":[]}`)) }))
	defer other.Close()
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Write([]byte(`{"keys":[]}`))
		case "/jwt":
			w.Write([]byte("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"))
		case "/text":
			w.Write([]byte(secret))
		case "/500":
			w.WriteHeader(500)
			w.Write([]byte(secret))
		case "/huge":
			w.Write([]byte(`{"k":"` + strings.Repeat("A", 8192) + `"}`))
		case "/gzip-bomb":
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			gz.Write([]byte(`{"k":"` + strings.Repeat("A", 1<<20) + `"}`))
			gz.Close()
		case "/to-http":
			http.Redirect(w, r, inside.URL+"/latest/meta-data", http.StatusFound)
		case "/to-other":
			http.Redirect(w, r, other.URL+"/keys", http.StatusFound)
		case "/to-self":
			http.Redirect(w, r, srv.URL+"/json", http.StatusFound)
		}
	}))
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	cases := []struct {
		url  string
		want string // "" for success
	}{
		{srv.URL + "/json", ""},
		{srv.URL + "/jwt", ""},
		{srv.URL + "/to-self", ""},
		{srv.URL + "/text", "neither JSON nor a JWT"},
		{srv.URL + "/500", "answered 500 Internal Server Error"},
		{srv.URL + "/huge", ErrTooLarge.Error()},
		{srv.URL + "/gzip-bomb", ErrTooLarge.Error()},
		{srv.URL + "/to-http", "to another origin"},
		{srv.URL + "/to-other", "to another origin"},
		{inside.URL + "/latest/meta-data", ErrNotHTTPS.Error()},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			client, err := fetchClient(ca, &Options{FetchTimeout: 5 * time.Second, MaxFetchBytes: 4096})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Get(c.url)
			if err == nil {
				resp.Body.Close()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want %q", err, c.want)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Fatalf("the error quotes the answer: %v", err)
			}
		})
	}

	// Requests past the rate are refused without being sent.
	client, _ := fetchClient(ca, &Options{FetchTimeout: 5 * time.Second, MaxFetchBytes: 4096})
	refused := 0
	for range fetchBurst + 10 {
		resp, err := client.Get(srv.URL + "/json")
		if err != nil && strings.Contains(err.Error(), "requests a second") {
			refused++
		} else if err == nil {
			resp.Body.Close()
		}
	}
	if refused == 0 {
		t.Fatalf("%d requests in a burst were all sent", fetchBurst+10)
	}
}

// TestWithoutAnswers: errors that would quote an issuer's answer are cut
// before it; others pass unchanged.
func TestWithoutAnswers(t *testing.T) {
	cases := []struct{ in, want string }{
		{`oidc: verify token: failed to verify signature: fetching keys oidc: failed to decode keys: json: cannot unmarshal string {"secret":"s3"}`,
			`oidc: verify token: failed to verify signature: fetching keys oidc: failed to decode keys (the issuer's answer is not shown)`},
		{`oidc: verify token: failed to verify signature: fetching keys oidc: get keys failed Get "https://x/keys": https://x/keys: issuer response exceeds the size limit (limit 4096)`,
			`oidc: verify token: failed to verify signature: fetching keys oidc: get keys failed Get "https://x/keys": https://x/keys: issuer response exceeds the size limit (limit 4096)`},
		{`oidc: could not expand distributed claims: while getting distributed claim "groups": secret`,
			`oidc: could not expand distributed claims (the issuer's answer is not shown)`},
		{`oidc: error evaluating claim validation expression: only production workloads`, `oidc: error evaluating claim validation expression: only production workloads`},
	}
	for _, c := range cases {
		if got := withoutAnswers(errors.New(c.in)).Error(); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.in, got, c.want)
		}
	}
	if withoutAnswers(nil) != nil {
		t.Error("nil became an error")
	}
}

// TestReload: a changed file replaces the issuers without a restart;
// a broken one, or one changing the anonymous section, changes nothing;
// kube's reload metrics count both.
func TestReload(t *testing.T) {
	i0, i1 := newIssuer(t), newIssuer(t)
	dir := t.TempDir()
	f := writeFile(t, dir, jwtConfig(i0))
	ctx := testContext(t)
	a, err := Load(ctx, options(f), quiet)
	if err != nil {
		t.Fatal(err)
	}
	go a.Run(ctx)
	tok0, _ := i0.Sign(oidctest.Claims{"sub": "a", "aud": "fleet", "env": "prod", "cluster": "e"})
	tok1, _ := i1.Sign(oidctest.Claims{"sub": "b", "aud": "fleet", "env": "prod", "cluster": "e"})
	eventually(t, "issuer 0", func() error { _, err := authenticate(a.Token, tok0); return err })
	if _, err := authenticate(a.Token, tok1); err == nil {
		t.Fatal("issuer 1 authenticates before it is configured")
	}

	writeFile(t, dir, jwtConfig(i1))
	eventually(t, "issuer 1 after the reload", func() error { _, err := authenticate(a.Token, tok1); return err })
	if _, err := authenticate(a.Token, tok0); err == nil {
		t.Fatal("issuer 0 still authenticates after it was removed")
	}
	eventually(t, "success counted", func() error { return reloads("success", 1) })

	for _, broken := range []string{
		"not: [yaml",
		jwtConfig(i0) + "anonymous:\n  enabled: true\n",
	} {
		writeFile(t, dir, broken)
		eventually(t, "failure counted", func() error { return reloads("failure", 1) })
		authnmetrics.ResetMetricsForTest()
		if _, err := authenticate(a.Token, tok1); err != nil {
			t.Fatalf("a refused reload changed the issuers: %v", err)
		}
	}
}

func reloads(status string, atLeast int) error {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return err
	}
	for _, f := range families {
		if f.GetName() != "apiserver_authentication_config_controller_automatic_reloads_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() == status && m.GetCounter().GetValue() >= float64(atLeast) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("no %s reload counted", status)
}

// BenchmarkFederatedToken is one verification of a federated issuer's
// token by kube's JWT authenticator (signature, claim rules and mappings
// in CEL), the cost of a cache miss.
func BenchmarkFederatedToken(b *testing.B) {
	i, err := oidctest.New()
	if err != nil {
		b.Fatal(err)
	}
	defer i.Close()
	dir := b.TempDir()
	p := filepath.Join(dir, "authn.yaml")
	os.WriteFile(p, []byte(jwtConfig(i)), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := Load(ctx, options(p), quiet)
	if err != nil {
		b.Fatal(err)
	}
	tok, _ := i.Sign(oidctest.Claims{"sub": "ci-42", "aud": "fleet", "env": "prod", "teams": []string{"build"}, "cluster": "east"})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := authenticate(a.Token, tok); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := authenticate(a.Token, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// refetching runs an Authentication over one issuer with the given refetch
// schedule, and returns a token of the issuer's first key once it verifies.
func refetching(t *testing.T, every, period time.Duration) (*oidctest.Issuer, *Authentication, oidctest.Claims, string) {
	t.Helper()
	i := newIssuer(t)
	ctx := testContext(t)
	o := options(writeFile(t, t.TempDir(), jwtConfig(i)))
	o.RefetchEvery, o.RefetchFor = every, period
	a, err := Load(ctx, o, quiet)
	if err != nil {
		t.Fatal(err)
	}
	go a.Run(ctx)
	claims := oidctest.Claims{"sub": "a", "aud": "fleet", "env": "prod", "cluster": "e"}
	old, _ := i.Sign(claims)
	eventually(t, "the issuer initialises", func() error { _, err := authenticate(a.Token, old); return err })
	return i, a, claims, old
}

// refusedThenFresh waits until old stops verifying, then checks that a
// token of the issuer's current key does, and returns it.
func refusedThenFresh(t *testing.T, what string, i *oidctest.Issuer, a *Authentication, claims oidctest.Claims, old string) string {
	t.Helper()
	eventually(t, what, func() error {
		if _, err := authenticate(a.Token, old); err == nil {
			return errors.New("still verifies")
		}
		return nil
	})
	fresh, _ := i.Sign(claims)
	if _, err := authenticate(a.Token, fresh); err != nil {
		t.Fatalf("the new key's token: %v", err)
	}
	return fresh
}

// TestRefetchWhileIssuerDown: a refetch while the issuer answers garbage
// keeps the running set, so tokens of the keys fetched before still
// verify; once the issuer answers again the refetch goes through and the
// key it dropped meanwhile is refused.
func TestRefetchWhileIssuerDown(t *testing.T) {
	i, a, claims, old := refetching(t, 100*time.Millisecond, time.Minute)

	i.SetMode(oidctest.Garbage)
	if err := i.Rotate(); err != nil {
		t.Fatal(err)
	}
	asked := i.Requests()
	a.Refetch()
	// The new set asks for the discovery document at once, and kube's
	// authenticator tries again every 10 s until it initialises.
	eventually(t, "the refetch tries the issuer while it is down", func() error {
		if got := i.Requests() - asked; got < 1 {
			return fmt.Errorf("%d requests since the refetch, want 1", got)
		}
		return nil
	})
	if _, err := authenticate(a.Token, old); err != nil {
		t.Fatalf("the running set was dropped while the issuer was down: %v", err)
	}

	i.SetMode(oidctest.Normal)
	refusedThenFresh(t, "the dropped key's token refused once the issuer answers", i, a, claims, old)
}

// TestRefetch: go-oidc keeps the keys it fetched, so a key the issuer no
// longer publishes still verifies its tokens; Refetch builds the issuers
// again, which fetch the key set anew, and the dropped key's tokens stop
// verifying (the fleet set-up's retired signing key, SECURITY.md (e)).
// Run repeats it every RefetchEvery for RefetchFor.
func TestRefetch(t *testing.T) {
	// A build waits a second for its issuers (healthEvery).
	i, a, claims, old := refetching(t, 100*time.Millisecond, 2*time.Second)
	if err := i.Rotate(); err != nil {
		t.Fatal(err)
	}
	if _, err := authenticate(a.Token, old); err != nil {
		t.Fatalf("precondition: the dropped key's token no longer verifies without a refetch: %v", err)
	}
	fetches := i.KeyFetches()
	a.Refetch()
	fresh := refusedThenFresh(t, "the dropped key's token refused after the refetch", i, a, claims, old)
	eventually(t, "a repeated refetch, RefetchEvery later", func() error {
		// The key set is fetched for the first token a new set verifies.
		if _, err := authenticate(a.Token, fresh); err != nil {
			return err
		}
		if got := i.KeyFetches(); got < fetches+2 {
			return fmt.Errorf("%d key set fetches since the first refetch, want 2", got-fetches)
		}
		return nil
	})
}

// TestReloadWhileRefetchWaits: a refetch waiting for an issuer that cannot
// be reached (up to a minute) does not hold up a reload of the file, which
// may be the operator taking that issuer out; once the refetch's issuers
// initialise after all, its set is dropped and the reloaded configuration
// stays.
func TestReloadWhileRefetchWaits(t *testing.T) {
	i0, i1 := newIssuer(t), newIssuer(t)
	dir := t.TempDir()
	ctx := testContext(t)
	o := options(writeFile(t, dir, jwtConfig(i0)))
	o.RefetchEvery, o.RefetchFor = time.Hour, time.Millisecond // one refetch per Refetch
	logs := &testlog.Buffer{}
	a, err := Load(ctx, o, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	go a.Run(ctx)
	claims := oidctest.Claims{"sub": "a", "aud": "fleet", "env": "prod", "cluster": "e"}
	tok0, _ := i0.Sign(claims)
	tok1, _ := i1.Sign(claims)
	eventually(t, "issuer 0", func() error { _, err := authenticate(a.Token, tok0); return err })

	i0.SetMode(oidctest.Garbage)
	asked := i0.Requests()
	a.Refetch()
	eventually(t, "the refetch tries issuer 0 while it is down", func() error {
		if i0.Requests() == asked {
			return errors.New("no request since the refetch")
		}
		return nil
	})

	// Before, the reload waited for the refetch's lock, which it held
	// until issuer 0 answered or a minute had passed.
	writeFile(t, dir, jwtConfig(i1))
	eventually(t, "issuer 1 after the reload, the refetch still waiting", func() error { _, err := authenticate(a.Token, tok1); return err })
	if logs.Contains("the federated issuers' keys") { // any end of a refetch
		t.Fatalf("the refetch ended while issuer 0 was still down:\n%s", logs.String())
	}

	i0.SetMode(oidctest.Normal)
	eventually(t, "the refetched set dropped", func() error {
		if !logs.Contains("a reload replaced the configuration meanwhile") {
			return errors.New("not yet")
		}
		return nil
	})
	if _, err := authenticate(a.Token, tok1); err != nil {
		t.Fatalf("the reloaded issuer after the refetch: %v", err)
	}
	if _, err := authenticate(a.Token, tok0); err == nil {
		t.Fatal("the refetch put back the issuer the reload took out")
	}
}
