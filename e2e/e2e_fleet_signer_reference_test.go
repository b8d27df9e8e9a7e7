package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
)

// TestFleetReferenceExternalSigner: a real kube-apiserver v1.33 signs its
// ServiceAccount tokens through trustplane external-signer
// (--service-account-signing-endpoint). kubectl create token at the
// reference gives a token the reference accepts (its authenticator takes
// the keys from FetchKeys) and whose signature verifies with a key of
// trustplane's JWKS. With trustplane stopped, a new token request at the
// reference fails within the sidecar's timeout, and the token already
// issued keeps verifying there.
func TestFleetReferenceExternalSigner(t *testing.T) {
	needReference(t)
	n := startNode(t)
	ref := newReference(t)
	// The sidecar's identity may sign for the reference's issuer and its
	// API audience (the issuer), and read the key set.
	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(rbac, []byte(externalSignerRBAC("reference-signer", ref.issuer())), 0o600); err != nil {
		t.Fatal(err)
	}
	n.mustKubectl("apply", "-f", rbac)
	// The reference fetches the keys again every 2 s (the sidecar's hint).
	_, sock := startExternalSigner(t, n.userKubeconfig(t, "reference-signer"), "--keys-refresh", "2s")
	// kube-apiserver asks the signer for its metadata and keys as it
	// starts: the RBAC above must already apply.
	waitFor(t, 10*time.Second, "the sidecar's identity to read the key set", func() bool {
		return do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil).code == http.StatusOK
	})
	ref.start(referenceOptions{OmitOwnSigningKey: true, ExtraArgs: []string{
		"--feature-gates", "ExternalServiceAccountTokenSigner=true",
		"--service-account-signing-endpoint", sock,
	}})
	ref.mustKubectl(t, "create", "serviceaccount", "default", "-n", "default")

	token := ref.mustKubectl(t, "create", "token", "default", "-n", "default")
	t.Run("the reference accepts its token signed by trustplane", func(t *testing.T) {
		waitForNil(t, 30*time.Second, "the reference to accept its own token", func() error {
			return isUser(ref.tokenConfig(token), "system:serviceaccount:default:default")
		})
	})

	t.Run("the signature verifies with trustplane's JWKS", func(t *testing.T) {
		var set jose.JSONWebKeySet
		r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil)
		if err := json.Unmarshal(r.body, &set); err != nil {
			t.Fatalf("trustplane's jwks: %v\n%s", err, r.body)
		}
		jws, err := jose.ParseSigned(token)
		if err != nil {
			t.Fatal(err)
		}
		kid := jws.Signatures[0].Header.KeyID
		keys := set.Key(kid)
		if len(keys) != 1 {
			t.Fatalf("trustplane's jwks has no key %s", kid)
		}
		payload, err := jws.Verify(keys[0].Key)
		if err != nil {
			t.Fatalf("the reference's token does not verify with trustplane's key: %v", err)
		}
		var claims struct {
			Iss string `json:"iss"`
		}
		if json.Unmarshal(payload, &claims) != nil || claims.Iss != ref.issuer() {
			t.Fatalf("claims %s: want the reference's issuer", payload)
		}
	})

	t.Run("a rotation in trustplane is one at the reference", func(t *testing.T) {
		pid := ref.pid()
		oldKid := jwtKid(t, token)
		n.mustRotate(t, "signing-key", "start")
		n.mustRotate(t, "signing-key", "promote")
		var fresh string
		waitForNil(t, 60*time.Second, "the reference to accept a token of trustplane's new key", func() error {
			fresh = ref.mustKubectl(t, "create", "token", "default", "-n", "default")
			if jwtKid(t, fresh) == oldKid {
				return errors.New("still signed by the old key")
			}
			return isUser(ref.tokenConfig(fresh), "system:serviceaccount:default:default")
		})
		if err := isUser(ref.tokenConfig(token), "system:serviceaccount:default:default"); err != nil {
			t.Fatalf("a token of the retiring key at the reference: %v", err)
		}
		if ref.pid() != pid {
			t.Fatal("the reference restarted")
		}
	})

	t.Run("with trustplane stopped, new tokens fail fast and issued ones verify", func(t *testing.T) {
		n.kill()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectlPath(t), "--kubeconfig", ref.kubeconfigPath(), "create", "token", "default", "-n", "default")
		cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("a token was issued with trustplane stopped: %s", out)
		}
		if !strings.Contains(string(out), "unreachable") {
			t.Errorf("the refusal does not say trustplane is unreachable: %s", out)
		}
		// A bound, not a timing assertion: the sidecar's --timeout is 2s;
		// a request that waited for kubectl's own minute would be the bug.
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("the token request took %v with trustplane stopped", d)
		}
		if err := isUser(ref.tokenConfig(token), "system:serviceaccount:default:default"); err != nil {
			t.Fatalf("a token issued before no longer verifies at the reference: %v", err)
		}
	})
}
