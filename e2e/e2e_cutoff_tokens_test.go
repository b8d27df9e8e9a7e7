package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestE2ECutOffNodeRefusesRetiredKey is attacker (e)'s row "cut a node
// off, then present there a token whose signing key was retired after the
// cut": the node has not applied the retirement and still holds the key.
// Once it is outside --max-stale-read it verifies no token of this
// cluster without catching up first, and, unable to, answers a bearer
// request and a TokenReview 503 with Retry-After (before, both accepted
// the token). Healed, it refuses the token as every other node does.
func TestE2ECutOffNodeRefusesRetiredKey(t *testing.T) {
	const bound = 2 * time.Second
	cluster := startProxiedCluster(t, 3, "--controllers=false", "--max-stale-read", bound.String())
	byNode := map[*node]*proxiedNode{}
	var plain []*node
	for _, p := range cluster {
		byNode[p.node] = p
		plain = append(plain, p.node)
	}
	leader := leaderOf(t, plain)
	cut := byNode[followersOf(plain, leader)[0]]
	ctx := context.Background()
	cs := leader.clientset()
	if _, err := createSA(cs, "holder"); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "holder", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaked := tr.Status.Token
	leader.mustRotate(t, "signing-key", "start")
	waitFor(t, 30*time.Second, "every voter applied the new key", func() bool {
		_, err := leader.rotate("signing-key", "promote")
		return err == nil
	})

	// Cut the follower off, then retire the leaked token's key on the rest.
	heal := isolate(cluster, cut)
	defer heal()
	var rest2 []*node
	for _, n := range plain {
		if n != cut.node {
			rest2 = append(rest2, n)
		}
	}
	majority := leaderOf(t, rest2)
	majority.mustRotate(t, "signing-key", "finish", "--force")
	if st := review(t, majority.clientset(), leaked); st.Authenticated {
		t.Fatalf("precondition: %s accepts a token of the retired key", majority.name)
	}
	time.Sleep(bound + time.Second) // the cut node is now outside the bound

	bearer := tokenHTTPClient(t, cut.node, leaked)
	r := do(t, bearer, http.MethodGet, cut.url()+"/api/v1/namespaces/default/serviceaccounts/holder", nil, nil)
	if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), "cannot verify service account tokens") {
		t.Fatalf("the cut-off node answered a bearer request with the retired key's token %d: %s", r.code, r.body)
	}
	body, _ := json.Marshal(authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authenticationv1.TokenReviewSpec{Token: leaked},
	})
	reviewPath := cut.url() + "/apis/authentication.k8s.io/v1/tokenreviews"
	r = do(t, cut.httpClient(), http.MethodPost, reviewPath, jsonHeader("application/json"), body)
	if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || strings.Contains(string(r.body), `"authenticated":true`) {
		t.Fatalf("the cut-off node answered a review of the retired key's token %d: %s", r.code, r.body)
	}
	if strings.Contains(string(r.body), leaked) {
		t.Fatal("the refusal quotes the token")
	}

	heal()
	waitFor(t, 30*time.Second, cut.name+" to serve a resourceVersion=0 list again", func() bool {
		return do(t, cut.httpClient(), http.MethodGet, cut.url()+"/api/v1/namespaces/default/serviceaccounts?resourceVersion=0", nil, nil).code == http.StatusOK
	})
	if r := do(t, bearer, http.MethodGet, cut.url()+"/api/v1/namespaces/default/serviceaccounts/holder", nil, nil); r.code != http.StatusUnauthorized {
		t.Fatalf("healed, %s answered a bearer request with the retired key's token %d: %s", cut.name, r.code, r.body)
	}
	if st := review(t, cut.clientset(), leaked); st.Authenticated {
		t.Fatalf("healed, %s accepts a token of the retired key: %+v", cut.name, st)
	}
}

// tokenHTTPClient is an HTTP client of n that presents token and no
// client certificate, and never retries.
func tokenHTTPClient(t testing.TB, n *node, token string) *http.Client {
	t.Helper()
	c, err := rest.HTTPClientFor(n.tokenConfig(t, token))
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 30 * time.Second
	return c
}
