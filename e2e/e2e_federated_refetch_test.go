package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestE2EFederatedSelfDropsRetiredKey is attacker (e)'s row "with a leaked
// private key of a retired signing key, mint tokens for a federated
// issuer whose JWKS is this cluster's own" (the fleet set-up: issuer B, a
// kube-apiserver signing through trustplane's external signer, publishes
// the node's own key set). After rotate signing-key finish --force the
// node fetches the federated issuers' keys again
// (authnconfig.Authentication.Refetch), so a token of the retired key
// stops verifying without a restart; before, go-oidc kept the key it had
// fetched until the node restarted.
func TestE2EFederatedSelfDropsRetiredKey(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	n, b := rtFederatedSelf(t)
	rtApply(t, n, rtSignerRBAC("rt-b-signer", "rt-b", []string{b.url()}, []string{"trustplane"}))
	s := rtNewSigner(t, n, n.userConfig(t, "rt-b"))
	mint := func(sub string) string {
		now := time.Now().Unix()
		code, body, tok := s.sign(fmt.Sprintf(`{"iss":%q,"aud":"trustplane","sub":%q,"iat":%d,"exp":%d}`, b.url(), sub, now, now+600))
		if code != http.StatusOK {
			t.Fatalf("B's signer: %d %s", code, body)
		}
		return tok
	}
	var old string
	waitFor(t, 30*time.Second, "B's signer to mint a token trustplane accepts", func() bool {
		old = mint("before")
		return rtReview(t, n, old).Authenticated
	})

	n.mustRotate(t, "signing-key", "start")
	waitFor(t, 30*time.Second, "the new key applied", func() bool {
		_, err := n.rotate("signing-key", "promote")
		return err == nil
	})
	n.mustRotate(t, "signing-key", "finish", "--force")
	waitFor(t, 30*time.Second, "a token of the retired key refused for issuer B", func() bool {
		return !rtReview(t, n, old).Authenticated
	})
	waitFor(t, 30*time.Second, "a token of the new key accepted for issuer B", func() bool {
		return rtReview(t, n, mint("after")).Authenticated
	})
}
