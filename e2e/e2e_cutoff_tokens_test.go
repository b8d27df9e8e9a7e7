package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestE2ECutOffNodeRefusesRetiredKey is attacker (e)'s rows "cut a node
// off, then present there a token whose signing key was retired after the
// cut" and "... act there on an RBAC binding deleted since": the node has
// not applied the retirement or the deletion. Once it is outside
// --max-stale-read it authenticates and authorises nothing without
// catching up first (api.Server.withCaughtUp), and, unable to, answers a
// bearer request, a TokenReview, a SelfSubjectAccessReview of the user
// whose binding went and the admin's SubjectAccessReview of that user 503
// with Retry-After (before, the token was accepted and both reviews said
// allowed). The token's own rule (authn's freshTokens) answers on the
// status paths that are served without catching up. Its Raft status is
// still served. Healed, it refuses the token and the user as every other
// node does.
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
	// (The aggregated ClusterRole view has no rules without the
	// controllers.)
	if _, err := cs.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmap-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := httpClientFor(t, cut.node.userConfig(t, "alice"))
	ssarBody, _ := json.Marshal(authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
		Spec:     authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "configmaps"}},
	})
	ssar := func() httpResult {
		return do(t, alice, http.MethodPost, cut.url()+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", jsonHeader("application/json"), ssarBody)
	}
	sarBody, _ := json.Marshal(authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec:     authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "configmaps"}},
	})
	sarPath := cut.url() + "/apis/authorization.k8s.io/v1/subjectaccessreviews"
	waitFor(t, 30*time.Second, cut.name+" to apply alice's binding", func() bool {
		return strings.Contains(string(ssar().body), `"allowed":true`)
	})
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
	if err := majority.clientset().RbacV1().RoleBindings("default").Delete(ctx, "alice-view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := review(t, majority.clientset(), leaked); st.Authenticated {
		t.Fatalf("precondition: %s accepts a token of the retired key", majority.name)
	}
	time.Sleep(bound + time.Second) // the cut node is now outside the bound

	bearer := tokenHTTPClient(t, cut.node, leaked)
	body, _ := json.Marshal(authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authenticationv1.TokenReviewSpec{Token: leaked},
	})
	reviewPath := cut.url() + "/apis/authentication.k8s.io/v1/tokenreviews"
	post := func(c *http.Client, path string, body []byte) func() (httpResult, error) {
		return func() (httpResult, error) {
			return tryDo(c, http.MethodPost, path, jsonHeader("application/json"), body)
		}
	}
	get := func(c *http.Client, path string) func() (httpResult, error) {
		return func() (httpResult, error) { return tryDo(c, http.MethodGet, path, nil, nil) }
	}
	got := concurrently(t,
		get(bearer, cut.url()+"/api/v1/namespaces/default/serviceaccounts/holder"),
		post(cut.httpClient(), reviewPath, body),
		post(alice, cut.url()+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssarBody),
		post(cut.httpClient(), sarPath, sarBody),
		get(bearer, cut.url()+"/metrics"),
		get(cut.httpClient(), cut.url()+"/debug/trustplane/raft"),
	)
	for i, what := range []string{
		"a bearer request with the retired key's token",
		"a review of the retired key's token",
		"alice's SelfSubjectAccessReview, her binding deleted",
		"a SubjectAccessReview of alice, her binding deleted",
	} {
		r := got[i]
		if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), "has not caught up with the cluster's leader and cannot authenticate or authorise") {
			t.Fatalf("the cut-off node answered %s %d: %s", what, r.code, r.body)
		}
		if strings.Contains(string(r.body), leaked) {
			t.Fatal("the refusal quotes the token")
		}
	}
	// /metrics is served without catching up; the token's own rule
	// refuses the token there.
	if r := got[4]; r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), "cannot verify service account tokens") {
		t.Fatalf("the cut-off node answered the retired key's token on /metrics %d: %s", r.code, r.body)
	}
	if r := got[5]; r.code != http.StatusOK {
		t.Fatalf("the cut-off node's Raft status: %d %s", r.code, r.body)
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
	if r := ssar(); r.code != http.StatusCreated || strings.Contains(string(r.body), `"allowed":true`) {
		t.Fatalf("healed, %s answered alice's SelfSubjectAccessReview %d: %s", cut.name, r.code, r.body)
	}
}

// httpClientFor is an HTTP client of cfg that never retries (client-go's
// REST client retries a 503 with Retry-After ten times).
func httpClientFor(t testing.TB, cfg *rest.Config) *http.Client {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 30 * time.Second
	return c
}

// tokenHTTPClient is an HTTP client of n that presents token and no
// client certificate, and never retries.
func tokenHTTPClient(t testing.TB, n *node, token string) *http.Client {
	t.Helper()
	return httpClientFor(t, n.tokenConfig(t, token))
}
