package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The fleet tests against a real kube-apiserver v1.33 (the reference,
// reference_harness_test.go): trustplane as its token webhook, as a JWT
// issuer it trusts, and as a relying party of its own issuer. They run
// with make fleet-test only.

// TestFleetReferenceWebhook: kube-apiserver authenticates bearer tokens
// with trustplane's TokenReview as its token webhook
// (--authentication-token-webhook-config-file). A token trustplane issued
// for the reference's audience is trustplane's ServiceAccount there; a
// token for trustplane's own audience is not; and once the ServiceAccount
// is deleted on trustplane, its token stops authenticating at the
// reference when the caches expire: trustplane's (3 s), the webhook's
// (2 s here) and kube-apiserver's own cache of every successful token
// authentication in front of them (10 s, no flag sets it).
func TestFleetReferenceWebhook(t *testing.T) {
	needReference(t)
	n := startNode(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("trustplane log (tail):\n%s", n.logTail())
		}
	})
	cs := n.clientset()
	// The reference reviews tokens as a user of trustplane who may do
	// that and nothing else, as kube's delegated authentication does.
	const webhookUser = "reference-token-webhook"
	bindClusterRole(t, cs, "reference-token-webhook", "system:auth-delegator", userSubject(webhookUser))
	ref := startReference(t, referenceOptions{ExtraArgs: []string{
		"--authentication-token-webhook-config-file", webhookKubeconfig(t, n, webhookUser),
		// kube-apiserver sends v1beta1 TokenReviews unless told.
		"--authentication-token-webhook-version", "v1",
		"--authentication-token-webhook-cache-ttl", "2s",
	}})

	createServiceAccount(t, cs, "default", "workload")
	token := requestToken(t, cs, "default", "workload", authenticationv1.TokenRequestSpec{Audiences: []string{ref.issuer()}}).Status.Token
	const username = "system:serviceaccount:default:workload"

	if !t.Run("a token for the reference authenticates there", func(t *testing.T) {
		var who authenticationv1.UserInfo
		waitForNil(t, 30*time.Second, "the reference to accept the token", func() error {
			var err error
			who, err = whoIs(ref.tokenConfig(token))
			return err
		})
		if who.Username != username || !slices.Contains(who.Groups, "system:serviceaccounts:default") || !slices.Contains(who.Groups, "system:authenticated") {
			t.Fatalf("the reference sees %+v, want %s in system:serviceaccounts:default", who, username)
		}
	}) {
		return
	}

	t.Run("a token for trustplane's own audience does not", func(t *testing.T) {
		own := requestToken(t, cs, "default", "workload", authenticationv1.TokenRequestSpec{}).Status.Token
		if err := isUser(n.tokenConfig(t, own), username); err != nil {
			t.Fatalf("at trustplane: %v", err)
		}
		if _, err := whoIs(ref.tokenConfig(own)); !apierrors.IsUnauthorized(err) {
			t.Fatalf("at the reference: %v, want 401", err)
		}
	})

	t.Run("deleting the ServiceAccount revokes the token at the reference", func(t *testing.T) {
		if err := cs.CoreV1().ServiceAccounts("default").Delete(context.Background(), "workload", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// First trustplane itself, so that a failure says which side kept it.
		waitForNil(t, 30*time.Second, "trustplane's TokenReview to refuse the token", func() error {
			if st := review(t, cs, token, ref.issuer()); st.Authenticated {
				return fmt.Errorf("%w as %s", errStillAccepted, st.User.Username)
			}
			return nil
		})
		waitForNil(t, 60*time.Second, "the reference to refuse the token", func() error {
			who, err := whoIs(ref.tokenConfig(token))
			switch {
			case err == nil:
				return fmt.Errorf("%w as %s", errStillAccepted, who.Username)
			case apierrors.IsUnauthorized(err):
				return nil
			}
			return err
		})
	})
}

// TestFleetReferenceIssuers: trust between trustplane's ServiceAccount
// issuer and kube-apiserver's, both ways, through each side's
// AuthenticationConfiguration. Trustplane's issuer is its own URL and its
// discovery documents are public there; the reference's JWT authenticator
// accepts its tokens with the claim mapping, and keeps accepting them
// across a signing-key rotation without a restart. The reference's tokens
// authenticate at trustplane with its CEL mapping, and its validation
// rule refuses those of other namespaces.
//
// kube-apiserver's JWT authenticator (go-oidc v2) keeps trustplane's key
// set for the documents' Cache-Control max-age and refetches it on an
// unknown key id only once that has passed; trustplane runs with
// --service-account-jwks-max-age 5s, so the reference learns the promoted
// key within seconds (with kube's hour, within the hour: the wait
// docs/OPERATIONS.md puts between start and promote).
func TestFleetReferenceIssuers(t *testing.T) {
	needReference(t)
	// The reference's certificates first: trustplane's configuration
	// names its CA and URL. Then trustplane, whose CA and URL the
	// reference's configuration names; each side's issuer initialises in
	// the background and retries until the other answers.
	ref := newReference(t)
	listen := freePort(t)
	tpIssuer := "https://" + listen
	dir := t.TempDir()
	tpConfig := filepath.Join(dir, "trustplane-authentication.yaml")
	writeConfig(t, tpConfig, trustplaneTrustsReference(ref))
	n := startNodeAt(t, listen, "--service-account-issuer", tpIssuer, "--authentication-config", tpConfig, "--service-account-jwks-max-age", "5s")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("trustplane log (tail):\n%s", n.logTail())
		}
	})
	cs := n.clientset()
	n.mustKubectl("create", "clusterrolebinding", "oidc-discovery-public", "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
	waitForNil(t, 10*time.Second, "trustplane's discovery documents to be public at its issuer URL", func() error {
		_, err := discoveryAt(n.anonClient(), tpIssuer)
		return err
	})
	refConfig := filepath.Join(dir, "reference-authentication.yaml")
	writeConfig(t, refConfig, referenceTrustsTrustplane(tpIssuer, nodeCAPEM(t, n)))
	ref.start(referenceOptions{ExtraArgs: []string{"--authentication-config", refConfig}})

	createServiceAccount(t, cs, "default", "fleet-client")
	tokenFor := func(t *testing.T) string {
		return requestToken(t, cs, "default", "fleet-client", authenticationv1.TokenRequestSpec{Audiences: []string{"reference"}}).Status.Token
	}
	const atReference = "trustplane:system:serviceaccount:default:fleet-client"
	first := tokenFor(t)

	t.Run("the reference trusts trustplane's issuer", func(t *testing.T) {
		waitForNil(t, 60*time.Second, "the reference to accept trustplane's token", func() error {
			return isUser(ref.tokenConfig(first), atReference)
		})
	})

	t.Run("across a signing-key rotation without a restart", func(t *testing.T) {
		pid := ref.pid()
		oldKid := jwtKid(t, first)
		// The reference has fetched the key set (it accepted first); the
		// new key is published after that fetch.
		n.mustRotate(t, "signing-key", "start")
		n.mustRotate(t, "signing-key", "promote")
		second := tokenFor(t)
		if kid := jwtKid(t, second); kid == oldKid {
			t.Fatalf("a token after promote is signed by the old key %s", kid)
		}
		waitForNil(t, 60*time.Second, "the reference to accept a token of the new key", func() error {
			return isUser(ref.tokenConfig(second), atReference)
		})
		// The retiring key stays published until finish.
		if err := isUser(ref.tokenConfig(first), atReference); err != nil {
			t.Fatalf("a token of the retiring key at the reference: %v", err)
		}
		if !ref.running() || ref.pid() != pid {
			t.Fatalf("kube-apiserver was restarted or exited (pid %d, was %d)", ref.pid(), pid)
		}
	})

	t.Run("trustplane trusts the reference's issuer", func(t *testing.T) {
		ref.mustKubectl(t, "create", "clusterrolebinding", "oidc-discovery-public", "--clusterrole=system:service-account-issuer-discovery", "--group=system:unauthenticated")
		anon := ref.anonClient()
		waitForNil(t, 10*time.Second, "the reference's discovery document to be public at its issuer URL", func() error {
			_, err := discoveryAt(anon, ref.issuer())
			return err
		})
		// No kube-controller-manager runs to make the default ServiceAccount.
		ref.mustKubectl(t, "create", "serviceaccount", "default", "-n", "default")
		ref.mustKubectl(t, "create", "namespace", "elsewhere")
		ref.mustKubectl(t, "create", "serviceaccount", "intruder", "-n", "elsewhere")
		good := ref.mustKubectl(t, "create", "token", "default", "-n", "default", "--audience", "trustplane")
		bad := ref.mustKubectl(t, "create", "token", "intruder", "-n", "elsewhere", "--audience", "trustplane")
		const atTrustplane = "ref:system:serviceaccount:default:default"

		waitForNil(t, 60*time.Second, "trustplane to accept the reference's token", func() error {
			return isUser(n.tokenConfig(t, good), atTrustplane)
		})
		wantStatus(t, do(t, n.anonClient(), http.MethodGet, n.url()+"/api", map[string]string{"Authorization": "Bearer " + bad}, nil),
			http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		if st := review(t, cs, good); !st.Authenticated || st.User.Username != atTrustplane || strings.Join(st.Audiences, ",") != tpIssuer {
			t.Fatalf("TokenReview of the reference's token: %+v, want %s for audience %s", st, atTrustplane, tpIssuer)
		}
		// Refused by the rule, not for a reason any token of the
		// reference's would meet.
		if st := review(t, cs, bad); st.Authenticated || !strings.Contains(st.Error, "only the reference's default namespace") {
			t.Fatalf("TokenReview of another namespace's token: %+v, want refused with the rule's message", st)
		}
	})
}

// trustplaneTrustsReference is trustplane's AuthenticationConfiguration:
// its discovery documents public, and the reference's issuer trusted for
// audience "trustplane", its users named "ref:<sub>", from its default
// namespace only.
func trustplaneTrustsReference(ref *reference) string {
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
  - expression: "claims['kubernetes.io']['namespace'] == 'default'"
    message: only the reference's default namespace
  claimMappings:
    username:
      expression: "'ref:' + claims.sub"
`, ref.issuer(), indentPEM(ref.caPEM()))
}

// referenceTrustsTrustplane is the reference's AuthenticationConfiguration:
// trustplane's issuer trusted for audience "reference", its users named
// "trustplane:<sub>".
func referenceTrustsTrustplane(issuer string, caPEM []byte) string {
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    audiences: [reference]
    certificateAuthority: |
%s
  claimMappings:
    username:
      claim: sub
      prefix: "trustplane:"
`, issuer, indentPEM(caPEM))
}

// indentPEM indents PEM text as a YAML block scalar under
// certificateAuthority.
func indentPEM(pem []byte) string {
	return "      " + strings.ReplaceAll(strings.TrimSpace(string(pem)), "\n", "\n      ")
}

func writeConfig(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// createServiceAccount creates ns/name through cs.
func createServiceAccount(t testing.TB, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create serviceaccount %s/%s: %v", ns, name, err)
	}
}

// discoveryAt reads issuer's OIDC discovery document with c at issuer's
// URL, checks that it names issuer, and counts the keys at its jwks_uri:
// what a relying party's JWT authenticator reads.
func discoveryAt(c *http.Client, issuer string) (keys int, err error) {
	get := func(url string, into any) error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(into)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := get(issuer+"/.well-known/openid-configuration", &doc); err != nil {
		return 0, err
	}
	if doc.Issuer != issuer {
		return 0, fmt.Errorf("the discovery document names issuer %q, want %q", doc.Issuer, issuer)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := get(doc.JWKSURI, &set); err != nil {
		return 0, err
	}
	return len(set.Keys), nil
}
