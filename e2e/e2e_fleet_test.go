package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustplane/trustplane/internal/oidctest"
)

// fleetAuthConfig is the AuthenticationConfiguration the fleet tests run
// a node with: anonymous access to the two discovery documents only, and
// one federated issuer whose tokens map to "<prefix>:<sub>", must carry
// env=prod, may not name root and may not map to a system: user or group. docs/OPERATIONS.md "Fleet identity"
// shows the same file.
func fleetAuthConfig(i *oidctest.Issuer, prefix string) string {
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
anonymous:
  enabled: true
  conditions:
  - path: /.well-known/openid-configuration
  - path: /openid/v1/jwks
jwt:
- issuer:
    url: %s
    audiences: [trustplane]
    certificateAuthority: |
%s
  claimValidationRules:
  - expression: "claims.env == 'prod'"
    message: only production workloads
  claimMappings:
    username:
      expression: "'%s:' + claims.sub"
    groups:
      expression: "has(claims.teams) ? claims.teams : []"
  userValidationRules:
  - expression: "!user.username.endsWith(':root')"
    message: no root
  - expression: "!user.username.startsWith('system:') && !user.groups.exists(g, g.startsWith('system:'))"
    message: no system identities
`, i.URL, indentPEM([]byte(i.CAPEM)), prefix)
}

// TestE2EFleetIdentity: one node with --authentication-config. The
// discovery documents, and nothing else, are public once RBAC allows it;
// the jwks_uri is the one configured; a federated issuer's tokens
// authenticate with their claim mappings and rules, TokenReview answers
// for them, and a changed file takes effect without a restart.
func TestE2EFleetIdentity(t *testing.T) {
	iss := startIssuer(t)
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	if err := os.WriteFile(file, []byte(fleetAuthConfig(iss, "ci")), 0o600); err != nil {
		t.Fatal(err)
	}
	const jwksURI = "https://trustplane.example.com/openid/v1/jwks"
	n := startNode(t, "--authentication-config", file, "--service-account-jwks-uri", jwksURI, "--service-account-jwks-max-age", "90s")
	n.trustplaneOnly(t, "a node started with --authentication-config")
	anon := n.anonClient()

	t.Run("discovery is public once RBAC binds it", func(t *testing.T) {
		// Anonymous, but RBAC grants system:unauthenticated nothing yet.
		wantStatus(t, do(t, anon, http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil), http.StatusForbidden, metav1.StatusReasonForbidden,
			`forbidden: User "system:anonymous" cannot get path "/openid/v1/jwks"`)
		n.mustKubectl("create", "clusterrolebinding", "oidc-discovery-public", "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		waitFor(t, 10*time.Second, "the binding to apply", func() bool {
			return do(t, anon, http.MethodGet, n.url()+"/.well-known/openid-configuration", nil, nil).code == http.StatusOK
		})
		r := do(t, anon, http.MethodGet, n.url()+"/.well-known/openid-configuration", nil, nil)
		if err := json.Unmarshal(r.body, &doc); err != nil || doc.JWKSURI != jwksURI || doc.Issuer != "https://kubernetes.default.svc.cluster.local" {
			t.Fatalf("discovery document %s (%v), want jwks_uri %s", r.body, err, jwksURI)
		}
		if r := do(t, anon, http.MethodGet, n.url()+"/openid/v1/jwks?x=1", nil, nil); r.code != http.StatusOK || !strings.Contains(string(r.body), `"keys"`) {
			t.Fatalf("jwks with a query: %d %s", r.code, r.body)
		}
		// How long relying parties may keep the keys: --service-account-jwks-max-age.
		for _, p := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
			if cc := do(t, anon, http.MethodGet, n.url()+p, nil, nil).header.Get("Cache-Control"); cc != "public, max-age=90" {
				t.Errorf("%s: Cache-Control %q, want public, max-age=90", p, cc)
			}
		}
	})

	t.Run("every other path stays 401", func(t *testing.T) {
		before := n.snapshot(t, "serviceaccounts", "secrets", "configmaps")
		for _, p := range []string{
			"/openid/v1/jwks/", "/openid/v1/jwks/..", "/openid/v1/../v1/jwks", "/openid/v1/./jwks", "/openid/v1%2Fjwks",
			"/openid/v1/%6Awks", "/.well-known%2Fopenid-configuration", "/OPENID/V1/JWKS", "/openid/v1/jwksx",
			"/api/v1/namespaces", "/apis", "/api/v1/namespaces/default/serviceaccounts/default/token",
		} {
			wantStatus(t, do(t, anon, http.MethodGet, n.url()+p, nil, nil), http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		}
		// A bad token on a public path is a bad credential, not none.
		wantStatus(t, do(t, anon, http.MethodGet, n.url()+"/openid/v1/jwks", map[string]string{"Authorization": "Bearer nope"}, nil),
			http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		// Other methods on the public paths are anonymous, and RBAC's
		// role allows get only.
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			if r := do(t, anon, m, n.url()+"/openid/v1/jwks", nil, []byte(`{}`)); r.code != http.StatusForbidden {
				t.Errorf("%s /openid/v1/jwks anonymously: %d %s, want 403", m, r.code, r.body)
			}
		}
		sameSnapshot(t, before, n.snapshot(t, "serviceaccounts", "secrets", "configmaps"))
	})

	claims := oidctest.Claims{"sub": "build-7", "aud": "trustplane", "env": "prod", "teams": []string{"platform"}}
	token, _ := iss.Sign(claims)
	t.Run("a federated token authenticates with its mapping", func(t *testing.T) {
		var who authenticationv1.UserInfo
		waitFor(t, 30*time.Second, "the issuer to initialise", func() bool {
			cs, err := kubernetes.NewForConfig(n.tokenConfig(t, token))
			if err != nil {
				t.Fatal(err)
			}
			ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return false
			}
			who = ssr.Status.UserInfo
			return true
		})
		if who.Username != "ci:build-7" || strings.Join(who.Groups, ",") != "platform,system:authenticated" {
			t.Fatalf("user %+v, want ci:build-7 in platform", who)
		}
		tr, err := n.clientset().AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !tr.Status.Authenticated || tr.Status.User.Username != "ci:build-7" || strings.Join(tr.Status.Audiences, ",") != "https://kubernetes.default.svc.cluster.local" {
			t.Fatalf("TokenReview %+v", tr.Status)
		}
	})

	t.Run("rule-breaking tokens are refused", func(t *testing.T) {
		for _, c := range []oidctest.Claims{
			{"sub": "build-8", "aud": "trustplane", "env": "dev"},
			{"sub": "root", "aud": "trustplane", "env": "prod"},
			{"sub": "build-9", "aud": "elsewhere", "env": "prod"},
			{"sub": "build-11", "aud": "trustplane", "env": "prod", "teams": []string{"system:masters"}},
		} {
			bad, _ := iss.Sign(c)
			wantStatus(t, do(t, anon, http.MethodGet, n.url()+"/api", map[string]string{"Authorization": "Bearer " + bad}, nil),
				http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		}
	})

	t.Run("the file reloads without a restart", func(t *testing.T) {
		pid := n.pid()
		if err := os.WriteFile(file, []byte(fleetAuthConfig(iss, "fleet")), 0o600); err != nil {
			t.Fatal(err)
		}
		fresh, _ := iss.Sign(oidctest.Claims{"sub": "build-10", "aud": "trustplane", "env": "prod"})
		waitFor(t, 60*time.Second, "the new mapping", func() bool {
			tr, err := n.clientset().AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: fresh}}, metav1.CreateOptions{})
			return err == nil && tr.Status.User.Username == "fleet:build-10"
		})
		if n.pid() != pid {
			t.Fatal("the node restarted")
		}
		if !reloadsCounted(t, n, "success") {
			t.Fatalf("no successful reload in /metrics")
		}
		// Changing the anonymous section is refused (kube's rule): the
		// discovery documents stay public, the failure is counted.
		if err := os.WriteFile(file, []byte(strings.Replace(fleetAuthConfig(iss, "fleet"), "  - path: /openid/v1/jwks\n", "", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the refused reload to be counted", func() bool { return reloadsCounted(t, n, "failure") })
		if r := do(t, anon, http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil); r.code != http.StatusOK {
			t.Fatalf("jwks after a refused reload: %d %s", r.code, r.body)
		}
	})
}

// reloadsCounted reports whether n's /metrics counts a reload of the
// authentication configuration with status (kube's metric, labelled with
// a hash of the server's id).
func reloadsCounted(t *testing.T, n *node, status string) bool {
	body := string(do(t, n.httpClient(), http.MethodGet, n.url()+"/metrics", nil, nil).body)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, `apiserver_authentication_config_controller_automatic_reloads_total{apiserver_id_hash="sha256:`) &&
			strings.Contains(l, `status="`+status+`"}`) && !strings.HasSuffix(l, " 0") {
			return true
		}
	}
	return false
}

// TestE2EHostileIssuers: issuers that hang or answer a key set of 64 MiB
// hold neither the node's start nor a request past
// --authentication-issuer-timeout, cost it no more than
// --authentication-issuer-max-bytes, and their tokens get 401.
func TestE2EHostileIssuers(t *testing.T) {
	slow, huge := startIssuer(t), startIssuer(t)
	slow.SetMode(oidctest.Slow)
	file := filepath.Join(t.TempDir(), "authentication.yaml")
	cfg := fleetAuthConfig(slow, "slow") + strings.SplitN(fleetAuthConfig(huge, "huge"), "jwt:\n", 2)[1]
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// Huge from the start: the discovery document answers, the key set
	// is fetched on the first token.
	huge.SetMode(oidctest.Huge)
	n := startNode(t, "--authentication-config", file, "--authentication-issuer-timeout", "1s", "--authentication-issuer-max-bytes", "64Ki")
	n.trustplaneOnly(t, "a node started with --authentication-config")
	for _, i := range []*oidctest.Issuer{slow, huge} {
		tok, _ := i.Sign(oidctest.Claims{"sub": "x", "aud": "trustplane", "env": "prod"})
		for range 3 {
			start := time.Now()
			wantStatus(t, do(t, n.anonClient(), http.MethodGet, n.url()+"/api", map[string]string{"Authorization": "Bearer " + tok}, nil),
				http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
			// A bound, not a timing assertion: a request that waited for
			// the 60 s hang would be the bug.
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("a token of a hostile issuer held the request %v", d)
			}
		}
	}
	tok, _ := huge.Sign(oidctest.Claims{"sub": "x", "aud": "trustplane", "env": "prod"})
	waitFor(t, 30*time.Second, "the node to fetch the huge key set", func() bool {
		wantStatus(t, do(t, n.anonClient(), http.MethodGet, n.url()+"/api", map[string]string{"Authorization": "Bearer " + tok}, nil),
			http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return huge.KeyFetches() > 0
	})
	if sent := huge.HugeSent(); sent >= oidctest.HugeBytes/2 {
		t.Fatalf("the node took %d bytes of a %d-byte key set", sent, oidctest.HugeBytes)
	}
	n.mustBeReady(t)
}

func startIssuer(t *testing.T) *oidctest.Issuer {
	t.Helper()
	i, err := oidctest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(i.Close)
	return i
}

// TestE2EAuthenticationConfigRefused: the node refuses to start with a
// configuration kube-apiserver refuses, with kube's message.
func TestE2EAuthenticationConfigRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	own := filepath.Join(dir, "own.yaml")
	os.WriteFile(good, []byte("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n"), 0o600)
	os.WriteFile(own, []byte("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: https://kubernetes.default.svc.cluster.local\n    audiences: [x]\n  claimMappings:\n    username:\n      claim: sub\n      prefix: \"\"\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--authentication-config", good, "--oidc-issuer-url", "https://example.com", "--oidc-client-id", "x"}, "authentication-config file and oidc-* flags are mutually exclusive"},
		{[]string{"--oidc-client-id", "x"}, "oidc-issuer-url and oidc-client-id must be specified together"},
		{[]string{"--authentication-config", own}, "URL must not overlap with disallowed issuers"},
		{[]string{"--service-account-jwks-uri", "http://example.com/keys"}, "service-account-jwks-uri requires https scheme"},
		{[]string{"--service-account-jwks-max-age", "500ms"}, "--service-account-jwks-max-age 500ms: must be at least 1s"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := append([]string{"serve", "--data-dir", t.TempDir(), "--listen", freePort(t), "--raft-addr", freePort(t)}, c.args...)
		out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: err %v, output %s; want a refusal with %q", c.args, err, out, c.want)
		}
	}
}
