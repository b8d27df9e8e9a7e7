package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestE2ERotateSigningKey rotates the token signing key online with
// trustplane rotate, step by step (issue 29's model): a pending key is
// published before it signs, promote makes it sign while the old key's
// tokens keep verifying, finish refuses while tokens may be valid and
// removes the old key when forced, and abort returns to the old key at
// either phase. No step restarts anything.
func TestE2ERotateSigningKey(t *testing.T) {
	n := startNode(t)
	n.needsProcess("trustplane rotate is trustplane's own")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := n.clientset()
	rotate, mustRotate := n.rotate, func(args ...string) string { t.Helper(); return n.mustRotate(t, args...) }
	token := func() string {
		t.Helper()
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	jwks := func() map[string]bool {
		t.Helper()
		r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil)
		var doc struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		if r.code != http.StatusOK || json.Unmarshal(r.body, &doc) != nil {
			t.Fatalf("jwks: %d %s", r.code, r.body)
		}
		out := map[string]bool{}
		for _, k := range doc.Keys {
			out[k.Kid] = true
		}
		return out
	}
	verifies := func(tok string) bool {
		t.Helper()
		rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rev.Status.Authenticated
	}

	out := mustRotate("signing-key", "status")
	if !strings.Contains(out, "active") || !strings.Contains(out, "no rotation in progress") {
		t.Fatalf("status of a fresh cluster:\n%s", out)
	}
	old := jwtKid(t, token())
	oldToken := token()
	if keys := jwks(); len(keys) != 1 || !keys[old] {
		t.Fatalf("jwks before: %v, want only %s", keys, old)
	}

	// start: the pending key is published before it signs.
	out = mustRotate("signing-key", "start")
	if !strings.Contains(out, "is pending") || !strings.Contains(out, "next: promote") {
		t.Fatalf("start:\n%s", out)
	}
	var pending string
	waitFor(t, 10*time.Second, "the pending key published", func() bool {
		keys := jwks()
		for k := range keys {
			if k != old {
				pending = k
			}
		}
		return len(keys) == 2
	})
	if got := jwtKid(t, token()); got != old {
		t.Fatalf("a token after start is signed by %s, want the active %s", got, old)
	}

	// promote: the new key signs, the old one's tokens verify.
	out = mustRotate("signing-key", "promote")
	if !strings.Contains(out, "promoted: key "+pending) || !strings.Contains(out, "next: finish") {
		t.Fatalf("promote:\n%s", out)
	}
	if got := jwtKid(t, token()); got != pending {
		t.Fatalf("a token after promote is signed by %s, want %s", got, pending)
	}
	if !verifies(oldToken) {
		t.Fatal("a token of the retiring key no longer verifies")
	}
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/metrics", nil, nil)
	for _, want := range []string{`trustplane_trust_root_keys{phase="active",root="signing-key"} 1`, `trustplane_trust_root_keys{phase="retiring",root="signing-key"} 1`} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}

	// finish refuses while the old key's tokens may be valid (no bound
	// is configured), changes nothing, and removes it when forced.
	if out, err := rotate("signing-key", "finish"); err == nil || !strings.Contains(out, "no bounded lifetime") || !strings.Contains(out, "--force") {
		t.Fatalf("finish without --force: %v\n%s", err, out)
	}
	if keys := jwks(); len(keys) != 2 || !verifies(oldToken) {
		t.Fatalf("a refused finish changed something: jwks %v", keys)
	}
	mustRotate("signing-key", "finish", "--force")
	if keys := jwks(); len(keys) != 1 || !keys[pending] {
		t.Fatalf("jwks after finish: %v, want only %s", keys, pending)
	}
	waitFor(t, 30*time.Second, "the old key's token to stop verifying", func() bool { return !verifies(oldToken) })

	// abort after promote: the previous key signs again, and what the
	// aborted key signed keeps verifying.
	if out, err := rotate("signing-key", "abort"); err == nil || !strings.Contains(out, "nothing to abort") {
		t.Fatalf("abort with nothing in progress: %v\n%s", err, out)
	}
	mustRotate("signing-key", "start")
	mustRotate("signing-key", "promote")
	aborted := token()
	out = mustRotate("signing-key", "abort")
	if !strings.Contains(out, "is active again") || jwtKid(t, token()) != pending || !verifies(aborted) {
		t.Fatalf("abort after promote:\n%s", out)
	}

	// Only system:masters may take a step; an unknown root is named.
	if out, err := rotate("gossip-key", "status"); err == nil || !strings.Contains(out, "cannot be rotated online") {
		t.Fatalf("an unknown root: %v\n%s", err, out)
	}
	r = do(t, n.userHTTP(t, "someone"), http.MethodPost, n.url()+"/debug/trustplane/rotate/signing-key/start", nil, nil)
	if r.code != http.StatusForbidden {
		t.Fatalf("a step by someone else: %d %s", r.code, r.body)
	}
}

// rotate runs trustplane rotate against n with its admin kubeconfig.
func (n *node) rotate(args ...string) (string, error) {
	out, err := exec.Command(binPath, append([]string{"rotate", "--kubeconfig", n.kubeconfigPath()}, args...)...).CombinedOutput()
	return string(out), err
}

// mustRotate is rotate, failing t on an error.
func (n *node) mustRotate(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.rotate(args...)
	if err != nil {
		t.Fatalf("trustplane rotate %v: %v\n%s", args, err, out)
	}
	return out
}

// jwtKid is the kid header of a compact JWS.
func jwtKid(t *testing.T, tok string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h.Kid
}
