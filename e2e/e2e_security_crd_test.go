package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
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

// grantDefinitions lets user, and no one else, take verbs on
// customresourcedefinitions: attacker class (c) of docs/SECURITY.md.
func grantDefinitions(t testing.TB, cs kubernetes.Interface, user string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-author"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-author"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "crd-author"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	grantDefinitions(t, cs, "mallory", "create", "delete", "get", "list", "watch", "update", "patch")
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
	// The cluster-role aggregation controller updates the aggregated roles
	// (admin, edit, view) at a moment of its own after start: the baseline
	// is taken once RBAC has stayed the same for a second.
	rbacBefore := rbacState()
	waitFor(t, 30*time.Second, "RBAC settled", func() bool {
		time.Sleep(time.Second)
		cur := rbacState()
		same := maps.Equal(cur, rbacBefore)
		rbacBefore = cur
		return same
	})
	keysBefore, pid := jwks(), n.pid()

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
			`The CustomResourceDefinition "clusterroles.rbac.authorization.k8s.io" is invalid: spec.group: Invalid value: "rbac.authorization.k8s.io": the group has built-in resources of this server; custom resources need a group of their own`},
		{"cluster role bindings in a version of their own", crdFor("rbac.authorization.k8s.io", "clusterrolebindings", hostile, ""),
			`spec.group: Invalid value: "rbac.authorization.k8s.io": the group has built-in resources of this server`},
		{"certificate signing requests", crdFor("certificates.k8s.io", "certificatesigningrequests", "", ""),
			`spec.group: Invalid value: "certificates.k8s.io": the group has built-in resources of this server`},
		{"leases", crdFor("coordination.k8s.io", "leases", "", ""),
			`spec.group: Invalid value: "coordination.k8s.io": the group has built-in resources of this server`},
		{"token reviews", crdFor("authentication.k8s.io", "tokenreviews", "", ""),
			`spec.group: Invalid value: "authentication.k8s.io": the group has built-in resources of this server`},
		// The red team's: a new plural in a built-in group whose kind is a
		// built-in one, which kubectl then maps to the custom resource.
		{"a built-in kind under another plural", strings.Replace(crdFor("rbac.authorization.k8s.io", "widgets", "", ""), "kind: Xwidgets", "kind: ClusterRole", 1),
			`spec.group: Invalid value: "rbac.authorization.k8s.io": the group has built-in resources of this server`},
		{"admission policies under another plural", strings.Replace(crdFor("admissionregistration.k8s.io", "vaps", "", ""), "kind: Xvaps", "kind: ValidatingAdmissionPolicy", 1),
			`spec.group: Invalid value: "admissionregistration.k8s.io": the group has built-in resources of this server`},
		{"a conversion webhook by service", crdFor("example.com", "hooks", "", `  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        service: {namespace: default, name: conv, port: 443}
`), `The CustomResourceDefinition "hooks.example.com" is invalid: spec.conversion.webhook.clientConfig.service: Forbidden: trustplane cannot reach Services; give the webhook's address as clientConfig.url`},
		{"a conversion webhook over http", crdFor("example.com", "httphooks", "", `  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        url: http://169.254.169.254/latest/meta-data/
`), `spec.conversion.webhookClientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme`},
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

// TestE2ESecurityAcceptedNames performs the red teams' attacks on issue
// 28's fixes: a user who may write definitions and their status forges a
// definition's status.acceptedNames to name another team's resource (so
// that its store reads the other objects and its cleanup deletes them), or
// its kind or singular (so that kubectl sends the other team's writes to
// it). Each forged status is refused with a 422 naming the other
// definition, the forged names are never served, and deleting the forged
// definitions deletes nothing of the other team's.
func TestE2ESecurityAcceptedNames(t *testing.T) {
	n := startNode(t)
	n.needsProcess("storage by the spec's plural is trustplane's own (docs/COMPATIBILITY.md)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := n.clientset()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-status-author"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions", "customresourcedefinitions/status"},
			Verbs: []string{"create", "delete", "get", "list", "watch", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-status-author"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "crd-status-author"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	admin := n.dynamicClient()
	mallory, err := dynamic.NewForConfig(n.userConfig(t, "mallory"))
	if err != nil {
		t.Fatal(err)
	}
	define := func(c dynamic.Interface, plural, kind string, versions []any, shortNames ...string) {
		t.Helper()
		names := map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"}
		if len(shortNames) > 0 {
			names["shortNames"] = shortNames
		}
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": plural + ".team.example"},
			"spec":     map[string]any{"group": "team.example", "scope": "Namespaced", "names": names, "versions": versions},
		}}
		if _, err := c.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("define %s: %v", plural, err)
		}
	}
	version := func(name string, served, storage bool) any {
		return map[string]any{"name": name, "served": served, "storage": storage,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
	}

	// The victim's resource and objects.
	define(admin, "widgets", "Widget", []any{version("v1", true, true)})
	widgets := admin.Resource(schema.GroupVersionResource{Group: "team.example", Version: "v1", Resource: "widgets"}).Namespace("default")
	waitFor(t, 60*time.Second, "widgets served", func() bool {
		_, err := widgets.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	for _, name := range []string{"w1", "w2", "w3"} {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "team.example/v1", "kind": "Widget", "metadata": map[string]any{"name": name}}}
		if _, err := widgets.Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The attack: a blocker that takes evils as a short name, so that the
	// naming controller leaves evils' accepted names alone; then evils'
	// status forged to accept the plural widgets.
	define(mallory, "blockers", "Blocker", []any{version("v9", true, true)}, "evils")
	define(mallory, "evils", "Evil", []any{version("v2", true, true), version("v1", false, false)})
	waitFor(t, 30*time.Second, "evils refused its plural", func() bool {
		crd, err := admin.Resource(crds).Get(ctx, "evils.team.example", metav1.GetOptions{})
		if err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "NamesAccepted" && m["status"] == "False" {
				return true
			}
		}
		return false
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := mallory.Resource(crds).Get(ctx, "evils.team.example", metav1.GetOptions{})
		if err != nil {
			return err
		}
		_ = unstructured.SetNestedMap(crd.Object, map[string]any{"plural": "widgets", "singular": "evil", "kind": "Evil", "listKind": "EvilList"}, "status", "acceptedNames")
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "NamesAccepted" || m["type"] == "Established" {
				m["status"], m["reason"], m["message"] = "True", "Forged", "forged"
			}
		}
		_ = unstructured.SetNestedSlice(crd.Object, conds, "status", "conditions")
		_, err = mallory.Resource(crds).UpdateStatus(ctx, crd, metav1.UpdateOptions{})
		return err
	})
	if !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `status.acceptedNames.plural: Invalid value: "widgets": is accepted by definition widgets.team.example`) {
		t.Fatalf("forging the status: %v, want 422 naming the victim's definition", err)
	}
	// The red team's second round: accepted names equal to the spec's,
	// whose kind, or whose singular, is the victim's, so that kubectl sends
	// the victim's writes of kind Widget, or its "get widgets", to them.
	for _, forged := range []struct{ plural, kind, singular, want string }{
		{"aaas", "Widget", "aaa", `status.acceptedNames.kind: Invalid value: "Widget": is accepted by definition widgets.team.example`},
		{"ccs", "Cc", "widgets", `status.acceptedNames.singular: Invalid value: "widgets": is accepted by definition widgets.team.example`},
	} {
		define(mallory, forged.plural, forged.kind, []any{version("v1", true, true)})
		var d *unstructured.Unstructured
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := mallory.Resource(crds).Get(ctx, forged.plural+".team.example", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_ = unstructured.SetNestedMap(cur.Object, map[string]any{"plural": forged.plural, "singular": forged.singular, "kind": forged.kind, "listKind": forged.kind + "List"}, "spec", "names")
			d, err = mallory.Resource(crds).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if d == nil {
				var err error
				if d, err = mallory.Resource(crds).Get(ctx, forged.plural+".team.example", metav1.GetOptions{}); err != nil {
					return err
				}
			}
			_ = unstructured.SetNestedMap(d.Object, map[string]any{"plural": forged.plural, "singular": forged.singular, "kind": forged.kind, "listKind": forged.kind + "List"}, "status", "acceptedNames")
			_ = unstructured.SetNestedSlice(d.Object, []any{
				map[string]any{"type": "NamesAccepted", "status": "True", "reason": "Forged", "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z"},
				map[string]any{"type": "Established", "status": "True", "reason": "Forged", "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z"},
			}, "status", "conditions")
			_, err := mallory.Resource(crds).UpdateStatus(ctx, d, metav1.UpdateOptions{})
			d = nil // a conflict reads the definition again
			return err
		})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), forged.want) {
			t.Fatalf("forging %s's names: %v, want 422 with %q", forged.plural, err, forged.want)
		}
		if err := mallory.Resource(crds).Delete(ctx, forged.plural+".team.example", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := widgets.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 3 {
		t.Fatalf("the victim's widgets after the forged definitions: %v %v", l, err)
	}

	// The forged names serve nothing: the victim's objects cannot be read
	// through them, and deleting the forged definition deletes none.
	alias := admin.Resource(schema.GroupVersionResource{Group: "team.example", Version: "v2", Resource: "widgets"}).Namespace("default")
	for i := 0; i < 10; i++ {
		if l, err := alias.List(ctx, metav1.ListOptions{}); err == nil {
			t.Fatalf("the forged names serve %d objects", len(l.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := mallory.Resource(crds).Delete(ctx, "evils.team.example", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "evils deleted", func() bool {
		_, err := admin.Resource(crds).Get(ctx, "evils.team.example", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	l, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 3 {
		t.Fatalf("the victim's widgets after the attack: %v %v", l, err)
	}
}
