package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// crdFor is a definition of plural.group that an attacker writes: one
// version stored and served unless versions says otherwise, kube's
// approval annotation set (anyone may write it), and extra spec lines.
func crdFor(group, plural, versions, extra string) string {
	if versions == "" {
		versions = `  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`
	}
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[2]s.%[1]s
  annotations:
    api-approved.kubernetes.io: https://github.com/kubernetes/kubernetes/pull/1
spec:
  group: %[1]s
  scope: Cluster
  names:
    plural: %[2]s
    singular: x%[2]s
    kind: X%[2]s
  versions:
%[3]s%[4]s`, group, plural, versions, extra)
}

// TestE2ESecurityCustomResourceDefinitions performs issue 28's attacks of
// class (c), a user who may create and delete definitions, against a real
// node, and shows each fails with nothing changed:
//
//  1. a definition in trustplane's internal group, to read, plant or
//     delete the token signing keys;
//  2. a definition naming a built-in resource (ClusterRoles), whose
//     deletion wiped every ClusterRole;
//  3. a definition version in a built-in group (ClusterRoleBindings v2),
//     to write JSON grants under the built-in keys;
//  4. a conversion webhook, by service (a nil resolver crashed every node)
//     and by URL (the node dialled wherever it was told).
func TestE2ESecurityCustomResourceDefinitions(t *testing.T) {
	n := startNode(t)
	n.needsProcess("issue 28's refusals are trustplane's own (docs/COMPATIBILITY.md)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := n.clientset()

	// Mallory may manage definitions, nothing else.
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-author"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"},
			Verbs: []string{"create", "delete", "get", "list", "watch", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-author"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "crd-author"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// What must not change: every ClusterRole and ClusterRoleBinding at
	// its resourceVersion, the published signing keys, and the process.
	rbacState := func() map[string]string {
		out := map[string]string{}
		roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list clusterroles: %v", err)
		}
		for _, r := range roles.Items {
			out["clusterrole/"+r.Name] = r.ResourceVersion
		}
		bindings, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list clusterrolebindings: %v", err)
		}
		for _, b := range bindings.Items {
			out["clusterrolebinding/"+b.Name] = b.ResourceVersion
		}
		return out
	}
	jwks := func() string {
		r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openid/v1/jwks", nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("jwks: %d %s", r.code, r.body)
		}
		return string(r.body)
	}
	rbacBefore, keysBefore, pid := rbacState(), jwks(), n.pid()

	write := manifests(t)
	hostile := `  - name: v1
    served: false
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"signing keys", crdFor("trustplane.internal", "signingkeys", "", ""),
			`The CustomResourceDefinition "signingkeys.trustplane.internal" is invalid: spec.group: Invalid value: "trustplane.internal": the group trustplane.internal and the groups under it are reserved for trustplane`},
		{"removal markers", crdFor("trustplane.internal", "removedmembers", "", ""),
			`spec.group: Invalid value: "trustplane.internal"`},
		{"a group under the internal one", crdFor("keys.trustplane.internal", "signingkeys", "", ""),
			`spec.group: Invalid value: "keys.trustplane.internal"`},
		{"cluster roles", crdFor("rbac.authorization.k8s.io", "clusterroles", "", ""),
			`The CustomResourceDefinition "clusterroles.rbac.authorization.k8s.io" is invalid: spec.names.plural: Invalid value: "clusterroles": clusterroles.rbac.authorization.k8s.io is a built-in resource of this server`},
		{"cluster role bindings in a version of their own", crdFor("rbac.authorization.k8s.io", "clusterrolebindings", hostile, ""),
			`spec.names.plural: Invalid value: "clusterrolebindings": clusterrolebindings.rbac.authorization.k8s.io is a built-in resource of this server`},
		{"certificate signing requests", crdFor("certificates.k8s.io", "certificatesigningrequests", "", ""),
			`certificatesigningrequests.certificates.k8s.io is a built-in resource of this server`},
		{"leases", crdFor("coordination.k8s.io", "leases", "", ""),
			`leases.coordination.k8s.io is a built-in resource of this server`},
		{"token reviews", crdFor("authentication.k8s.io", "tokenreviews", "", ""),
			`tokenreviews.authentication.k8s.io is a built-in resource of this server`},
		{"a conversion webhook by service", crdFor("example.com", "hooks", "", `  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        service: {namespace: default, name: conv, port: 443}
`), `The CustomResourceDefinition "hooks.example.com" is invalid: spec.conversion.strategy: Unsupported value: "Webhook": supported values: "None"`},
		{"a conversion webhook by URL", crdFor("example.com", "urlhooks", "", `  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        url: https://127.0.0.1:1/convert
`), `spec.conversion.strategy: Unsupported value: "Webhook": supported values: "None"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := n.userKubectl(t, "mallory", "create", "-f", write(strings.ReplaceAll(tc.name, " ", "-"), tc.manifest))
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("kubectl create: %v\n%s\nwant an error containing %q", err, out, tc.want)
			}
		})
	}

	// Nothing was stored, changed or published, and the node still runs.
	crds, err := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).List(ctx, metav1.ListOptions{})
	if err != nil || len(crds.Items) != 0 {
		t.Fatalf("definitions after the attacks: %v %v", crds, err)
	}
	sameSnapshot(t, rbacBefore, rbacState())
	if keysBefore != jwks() {
		t.Fatal("the published signing keys changed")
	}
	rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok.Status.Token}}, metav1.CreateOptions{})
	if err != nil || !rev.Status.Authenticated {
		t.Fatalf("a token issued before the attacks: %+v %v", rev, err)
	}
	if n.pid() != pid {
		t.Fatal("the node restarted")
	}
	n.mustBeReady(t)
}
