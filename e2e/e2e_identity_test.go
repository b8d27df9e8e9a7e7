package e2e_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestOIDCDiscoveryAccess: the OIDC discovery documents are readable by
// ServiceAccounts (kube's system:service-account-issuer-discovery binding)
// and refused to a user the bootstrap policy grants nothing, with kube's
// non-resource 403 wording.
func TestOIDCDiscoveryAccess(t *testing.T) {
	n := startNode(t)
	tr := requestToken(t, n.clientset(), "default", "default", authenticationv1.TokenRequestSpec{})
	tokenTransport, err := rest.TransportFor(n.tokenConfig(t, tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	sa := &http.Client{Transport: tokenTransport}
	nobody := n.userHTTP(t, "nobody")
	for _, path := range []string{"/.well-known/openid-configuration", "/openid/v1/jwks"} {
		if r := do(t, sa, http.MethodGet, n.url()+path, nil, nil); r.code != http.StatusOK {
			t.Errorf("GET %s as a ServiceAccount: %d %s", path, r.code, r.body)
		}
		wantStatus(t, do(t, nobody, http.MethodGet, n.url()+path, nil, nil), http.StatusForbidden, metav1.StatusReasonForbidden,
			`forbidden: User "nobody" cannot get path "`+path+`"`)
	}
	// Without credentials: 401 (kube-apiserver with --anonymous-auth: 403
	// for system:anonymous; docs/COMPATIBILITY.md).
	if !n.isTrustplane() {
		return
	}
	wantStatus(t, do(t, n.anonClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil), http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
}

// TestSelfSubjectReviewImpersonated: SelfSubjectReview returns the
// effective user, the impersonated one, with extra keys lower-cased.
func TestSelfSubjectReviewImpersonated(t *testing.T) {
	n := startNode(t)
	r := do(t, n.httpClient(), http.MethodPost, n.url()+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		map[string]string{"Content-Type": "application/json", "Impersonate-User": "dana", "Impersonate-Group": "team-x",
			"Impersonate-Uid": "u-1", "Impersonate-Extra-Scopes": "read"},
		[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if r.code != http.StatusCreated {
		t.Fatalf("SelfSubjectReview: %d %s", r.code, r.body)
	}
	var ssr authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(r.body, &ssr); err != nil {
		t.Fatal(err)
	}
	ui := ssr.Status.UserInfo
	if ui.Username != "dana" || ui.UID != "u-1" || !slices.Contains(ui.Groups, "team-x") || !slices.Contains(ui.Groups, "system:authenticated") {
		t.Fatalf("effective user %+v, want dana (u-1) in team-x and system:authenticated", ui)
	}
	if got := ui.Extra["scopes"]; len(got) != 1 || got[0] != "read" {
		t.Fatalf("extra %v, want scopes=[read] under a lower-case key", ui.Extra)
	}
}
