package main_test

import (
	"net/http"
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
	// Without credentials: 401.
	wantStatus(t, do(t, n.anonClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil), http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
}
