package e2e_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/certs"
)

// rbacRule is a resource rule in the core group unless groups are given.
func rbacRule(verbs []string, resources []string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{""}, Resources: resources, ResourceNames: names}
}

func createRole(t *testing.T, cs kubernetes.Interface, ns, name string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	_, err := cs.RbacV1().Roles(ns).Create(context.Background(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create role %s/%s: %v", ns, name, err)
	}
}

func createClusterRole(t *testing.T, cs kubernetes.Interface, name string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	_, err := cs.RbacV1().ClusterRoles().Create(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create clusterrole %s: %v", name, err)
	}
}

func bindRole(t *testing.T, cs kubernetes.Interface, ns, name, kind, role string, subjects ...rbacv1.Subject) {
	t.Helper()
	_, err := cs.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create rolebinding %s/%s: %v", ns, name, err)
	}
}

func bindClusterRole(t *testing.T, cs kubernetes.Interface, name, role string, subjects ...rbacv1.Subject) {
	t.Helper()
	_, err := cs.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create clusterrolebinding %s: %v", name, err)
	}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// userHTTP is a raw HTTPS client presenting the user's certificate.
func (n *node) userHTTP(t *testing.T, name string, groups ...string) *http.Client {
	t.Helper()
	tr, err := rest.TransportFor(n.userConfig(t, name, groups...))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// userKubeconfig writes a kubeconfig for user name (a client certificate
// of the node's CA) into a fresh directory and returns its path.
func (n *node) userKubeconfig(t testing.TB, name string) string {
	t.Helper()
	ca := n.clusterCA(t)
	certPEM, keyPEM, err := ca.Issue(certs.Request{CommonName: name, Client: true, Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := certs.WriteKubeconfig(path, certs.Kubeconfig{
		Server: n.url(), ClusterName: "trustplane", UserName: name, CAPEM: ca.CertPEM, CertPEM: certPEM, KeyPEM: keyPEM,
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

// userKubectl runs kubectl with a kubeconfig of its own for user name.
func (n *node) userKubectl(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	path := n.userKubeconfig(t, name)
	home := filepath.Dir(path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlPath(t), append([]string{"--kubeconfig", path}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+home)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestRBACGrantsAndDenies drives kube's RBAC through real clients: what a
// binding grants (verbs, resourceNames, subresources, nonResourceURLs,
// groups), what it does not (with kube-apiserver's 403 wording), the
// system:masters bypass, discovery for every authenticated user and the
// public health endpoints.
func TestRBACGrantsAndDenies(t *testing.T) {
	n := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true", "--feature-gates", "ClusterTrustBundle=true")
	ctx := context.Background()
	admin := n.clientset()
	createNamespace(t, admin, "rbac-a")
	createNamespace(t, admin, "rbac-b")
	if _, err := admin.CoreV1().ConfigMaps("rbac-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "allowed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps("rbac-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := n.userClientset(t, "alice")
	aliceHTTP := n.userHTTP(t, "alice")

	t.Run("without a binding the 403 reads as kube-apiserver's", func(t *testing.T) {
		_, err := alice.CoreV1().Secrets("rbac-a").List(ctx, metav1.ListOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "rbac-a"`)
		_, err = alice.CoreV1().Secrets("rbac-a").Get(ctx, "s", metav1.GetOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `secrets "s" is forbidden: User "alice" cannot get resource "secrets" in API group "" in the namespace "rbac-a"`)
		_, err = alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `namespaces is forbidden: User "alice" cannot list resource "namespaces" in API group "" at the cluster scope`)
		_, err = alice.RbacV1().ClusterRoles().Get(ctx, "cluster-admin", metav1.GetOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `clusterroles.rbac.authorization.k8s.io "cluster-admin" is forbidden: User "alice" cannot get resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope`)
		r := do(t, aliceHTTP, http.MethodGet, n.url()+"/logs", nil, nil)
		wantStatus(t, r, 403, metav1.StatusReasonForbidden, `forbidden: User "alice" cannot get path "/logs"`)
	})

	createRole(t, admin, "rbac-a", "secret-reader", rbacRule([]string{"get", "list"}, []string{"secrets"}))
	createRole(t, admin, "rbac-a", "one-configmap", rbacRule([]string{"get"}, []string{"configmaps"}, "allowed"))
	createRole(t, admin, "rbac-a", "pod-status", rbacRule([]string{"get"}, []string{"pods/status"}))
	bindRole(t, admin, "rbac-a", "alice-secrets", "Role", "secret-reader", userSubject("alice"))
	bindRole(t, admin, "rbac-a", "alice-cm", "Role", "one-configmap", userSubject("alice"))
	bindRole(t, admin, "rbac-a", "team-pod-status", "Role", "pod-status", groupSubject("team"))
	createClusterRole(t, admin, "logs-reader", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/logs", "/logs/*"}})
	bindClusterRole(t, admin, "alice-logs", "logs-reader", userSubject("alice"))

	t.Run("a role grants its verbs in its namespace only", func(t *testing.T) {
		if _, err := alice.CoreV1().Secrets("rbac-a").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := alice.CoreV1().Secrets("rbac-b").List(ctx, metav1.ListOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "rbac-b"`)
		err = alice.CoreV1().Secrets("rbac-a").Delete(ctx, "s", metav1.DeleteOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `secrets "s" is forbidden: User "alice" cannot delete resource "secrets" in API group "" in the namespace "rbac-a"`)
	})
	t.Run("resourceNames grant the named object only", func(t *testing.T) {
		if _, err := alice.CoreV1().ConfigMaps("rbac-a").Get(ctx, "allowed", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := alice.CoreV1().ConfigMaps("rbac-a").Get(ctx, "other", metav1.GetOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `configmaps "other" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "rbac-a"`)
		_, err = alice.CoreV1().ConfigMaps("rbac-a").List(ctx, metav1.ListOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "rbac-a"`)
	})
	t.Run("a subresource grant is not a grant on the parent, and a group binding binds members", func(t *testing.T) {
		bob := n.userHTTP(t, "bob", "team")
		// Authorised, the request reaches the store: the pod does not exist.
		r := do(t, bob, http.MethodGet, n.url()+"/api/v1/namespaces/rbac-a/pods/p/status", nil, nil)
		wantStatus(t, r, 404, metav1.StatusReasonNotFound, "")
		r = do(t, bob, http.MethodGet, n.url()+"/api/v1/namespaces/rbac-a/pods/p", nil, nil)
		wantStatus(t, r, 403, metav1.StatusReasonForbidden, `pods "p" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "rbac-a"`)
		r = do(t, aliceHTTP, http.MethodGet, n.url()+"/api/v1/namespaces/rbac-a/pods/p/status", nil, nil)
		wantStatus(t, r, 403, metav1.StatusReasonForbidden, `pods "p" is forbidden: User "alice" cannot get resource "pods/status" in API group "" in the namespace "rbac-a"`)
	})
	t.Run("nonResourceURLs grant paths", func(t *testing.T) {
		// Authorised, the request reaches the router, which serves no /logs.
		r := do(t, aliceHTTP, http.MethodGet, n.url()+"/logs", nil, nil)
		if r.code == http.StatusForbidden {
			t.Fatalf("GET /logs with a grant: %d %s", r.code, r.body)
		}
		r = do(t, n.userHTTP(t, "bob"), http.MethodGet, n.url()+"/logs/x", nil, nil)
		wantStatus(t, r, 403, metav1.StatusReasonForbidden, `forbidden: User "bob" cannot get path "/logs/x"`)
	})
	t.Run("system:masters bypasses RBAC", func(t *testing.T) {
		root := n.userClientset(t, "root", "system:masters")
		if _, err := root.CoreV1().Secrets("rbac-b").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("every authenticated user may discover the API", func(t *testing.T) {
		carol := n.userClientset(t, "carol")
		groups, err := carol.Discovery().ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range groups.Groups {
			found = found || g.Name == rbacv1.GroupName
		}
		if !found {
			t.Fatalf("groups %v lack %s", groups.Groups, rbacv1.GroupName)
		}
		if _, err := carol.Discovery().ServerResourcesForGroupVersion("rbac.authorization.k8s.io/v1"); err != nil {
			t.Fatal(err)
		}
		r := do(t, n.userHTTP(t, "carol"), http.MethodGet, n.url()+"/openapi/v3", nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("GET /openapi/v3: %d %s", r.code, r.body)
		}
	})
	t.Run("every authenticated user may read ClusterTrustBundles", func(t *testing.T) {
		carol := n.userClientset(t, "carol")
		if _, err := carol.CertificatesV1beta1().ClusterTrustBundles().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		err := carol.CertificatesV1beta1().ClusterTrustBundles().Delete(ctx, "x", metav1.DeleteOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `clustertrustbundles.certificates.k8s.io "x" is forbidden: User "carol" cannot delete resource "clustertrustbundles" in API group "certificates.k8s.io" at the cluster scope`)
	})
	t.Run("health and version are public, the API is not", func(t *testing.T) {
		anon := n.anonClient()
		for _, p := range []string{"/healthz", "/livez", "/readyz", "/version"} {
			if r := do(t, anon, http.MethodGet, n.url()+p, nil, nil); r.code != http.StatusOK {
				t.Errorf("anonymous GET %s: %d %s", p, r.code, r.body)
			}
		}
		wantStatus(t, do(t, anon, http.MethodGet, n.url()+"/api", nil, nil), 401, metav1.StatusReasonUnauthorized, "Unauthorized")
	})
	t.Run("kubectl apply of a Role", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "role.yaml")
		manifest := "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: applied\n  namespace: rbac-a\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [\"get\"]\n"
		if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := n.kubectl("apply", "-f", path); err != nil || !strings.Contains(out, "role.rbac.authorization.k8s.io/applied created") {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		if out, err := n.kubectl("get", "rolebindings", "-n", "rbac-a", "-o", "wide"); err != nil || !strings.Contains(out, "Role/secret-reader") || !strings.Contains(out, "alice") {
			t.Fatalf("kubectl get rolebindings -o wide: %v\n%s", err, out)
		}
	})
}

// TestRBACEscalation checks that a user who may write RBAC objects still
// cannot grant what they do not hold, unless they may escalate (roles) or
// bind (bindings), with kube's messages.
func TestRBACEscalation(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	createNamespace(t, admin, "esc")
	createClusterRole(t, admin, "rbac-writer", rbacv1.PolicyRule{
		Verbs: []string{"get", "list", "create", "update", "patch", "delete"}, APIGroups: []string{rbacv1.GroupName},
		Resources: []string{"roles", "rolebindings", "clusterroles", "clusterrolebindings"}})
	createClusterRole(t, admin, "secret-deleter", rbacRule([]string{"delete"}, []string{"secrets"}))
	bindClusterRole(t, admin, "manager-rbac", "rbac-writer", userSubject("manager"))
	createRole(t, admin, "esc", "secret-reader", rbacRule([]string{"get"}, []string{"secrets"}))
	bindRole(t, admin, "esc", "manager-secrets", "Role", "secret-reader", userSubject("manager"))
	manager := n.userClientset(t, "manager")
	roles := manager.RbacV1().Roles("esc")
	deleteSecrets := rbacRule([]string{"delete"}, []string{"secrets"})

	if _, err := roles.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "held"}, Rules: []rbacv1.PolicyRule{rbacRule([]string{"get"}, []string{"secrets"})}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a role with held rules: %v", err)
	}
	_, err := roles.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "more"}, Rules: []rbacv1.PolicyRule{deleteSecrets}}, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
		`roles.rbac.authorization.k8s.io "more" is forbidden: user "manager" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`+"\n"+
			`{APIGroups:[""], Resources:["secrets"], Verbs:["delete"]}`)
	_, err = manager.RbacV1().RoleBindings("esc").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "grant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "secret-deleter"},
		Subjects:   []rbacv1.Subject{userSubject("friend")},
	}, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
		`rolebindings.rbac.authorization.k8s.io "grant" is forbidden: user "manager" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:`+"\n"+
			`{APIGroups:[""], Resources:["secrets"], Verbs:["delete"]}`)

	// With escalate on roles and bind on the one ClusterRole, both pass.
	createRole(t, admin, "esc", "escalate-bind",
		rbacv1.PolicyRule{Verbs: []string{"escalate"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}},
		rbacv1.PolicyRule{Verbs: []string{"bind"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"secret-deleter"}})
	bindRole(t, admin, "esc", "manager-escalate-bind", "Role", "escalate-bind", userSubject("manager"))
	if _, err := roles.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "more"}, Rules: []rbacv1.PolicyRule{deleteSecrets}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("with escalate: %v", err)
	}
	if _, err := manager.RbacV1().RoleBindings("esc").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "grant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "secret-deleter"},
		Subjects:   []rbacv1.Subject{userSubject("friend")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("with bind: %v", err)
	}
	// bind names one role: another is still checked.
	_, err = manager.RbacV1().RoleBindings("esc").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{userSubject("manager")},
	}, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `rolebindings.rbac.authorization.k8s.io "admin" is forbidden: user "manager" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:*`)
	// escalate is namespaced: a ClusterRole is still checked.
	_, err = manager.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "more"}, Rules: []rbacv1.PolicyRule{deleteSecrets}}, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `clusterroles.rbac.authorization.k8s.io "more" is forbidden: user "manager" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:*`)
}

// TestAccessReviews checks the four reviews of authorization.k8s.io/v1 and
// kubectl auth can-i, as the user and through impersonation.
func TestAccessReviews(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	createNamespace(t, admin, "reviews")
	createRole(t, admin, "reviews", "secret-reader", rbacRule([]string{"get", "list"}, []string{"secrets"}))
	bindRole(t, admin, "reviews", "alice", "Role", "secret-reader", userSubject("alice"))
	alice := n.userClientset(t, "alice")
	listSecrets := func(ns string) *authorizationv1.ResourceAttributes {
		return &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "secrets"}
	}

	sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: listSecrets("reviews")}}, metav1.CreateOptions{})
	if err != nil || !sar.Status.Allowed || !strings.Contains(sar.Status.Reason, `RoleBinding "alice/reviews"`) {
		t.Fatalf("SubjectAccessReview: %+v, %v", sar, err)
	}
	sar, err = admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: listSecrets("default")}}, metav1.CreateOptions{})
	if err != nil || sar.Status.Allowed {
		t.Fatalf("SubjectAccessReview elsewhere: %+v, %v", sar, err)
	}
	lsar, err := admin.AuthorizationV1().LocalSubjectAccessReviews("reviews").Create(ctx, &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: "reviews"},
		Spec:       authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: listSecrets("reviews")}}, metav1.CreateOptions{})
	if err != nil || !lsar.Status.Allowed {
		t.Fatalf("LocalSubjectAccessReview: %+v, %v", lsar, err)
	}
	ssar, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: listSecrets("reviews")}}, metav1.CreateOptions{})
	if err != nil || !ssar.Status.Allowed {
		t.Fatalf("SelfSubjectAccessReview: %+v, %v", ssar, err)
	}
	ssrr, err := alice.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "reviews"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range ssrr.Status.ResourceRules {
		found = found || strings.Join(r.Resources, ",") == "secrets" && strings.Join(r.Verbs, ",") == "get,list"
	}
	if !found {
		t.Fatalf("SelfSubjectRulesReview lacks the role's rule: %+v", ssrr.Status)
	}
	// Asking about others is for those allowed to.
	_, err = alice.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "bob", ResourceAttributes: listSecrets("reviews")}}, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
		`subjectaccessreviews.authorization.k8s.io is forbidden: User "alice" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope`)

	// kubectl auth can-i, as the user and impersonated by the admin.
	if out, err := n.userKubectl(t, "alice", "auth", "can-i", "list", "secrets", "-n", "reviews"); err != nil || out != "yes" {
		t.Fatalf("can-i as alice: %q, %v", out, err)
	}
	if out, err := n.userKubectl(t, "alice", "auth", "can-i", "delete", "secrets", "-n", "reviews"); err == nil || out != "no" {
		t.Fatalf("can-i delete as alice: %q, %v (want no and exit 1)", out, err)
	}
	if out, err := n.kubectl("auth", "can-i", "list", "secrets", "-n", "default", "--as", "alice"); err == nil || out != "no" {
		t.Fatalf("can-i --as alice elsewhere: %q, %v", out, err)
	}
	if out, err := n.kubectl("auth", "can-i", "get", "secrets", "-n", "reviews", "--as", "alice"); err != nil || out != "yes" {
		t.Fatalf("can-i --as alice: %q, %v", out, err)
	}
	out, err := n.kubectl("auth", "can-i", "--list", "-n", "reviews", "--as", "alice")
	if err != nil {
		t.Fatalf("can-i --list: %v\n%s", err, out)
	}
	if !strings.Contains(out, "secrets") || !strings.Contains(out, "selfsubjectaccessreviews.authorization.k8s.io") || !strings.Contains(out, "[/apis/*]") {
		t.Fatalf("can-i --list as alice:\n%s", out)
	}
	if out := n.mustKubectl("auth", "can-i", "*", "*"); out != "yes" {
		t.Fatalf("admin can-i '*' '*': %q", out)
	}
}

// TestRBACAcrossNodes checks that a RoleBinding written through one node is
// enforced by another: each node authorises from its own applied state.
func TestRBACAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := context.Background()
	admin := nodes[0].clientset()
	createNamespace(t, admin, "spread")
	createRole(t, admin, "spread", "cm-writer", rbacRule([]string{"create", "get"}, []string{"configmaps"}))
	far := nodes[2].userClientset(t, "alice")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	_, err := far.CoreV1().ConfigMaps("spread").Create(ctx, cm, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "spread"`)

	bindRole(t, admin, "spread", "alice", "Role", "cm-writer", userSubject("alice"))
	// The third node applies the binding on its own schedule; the wait
	// bounds it and asserts nothing about how long it took.
	waitFor(t, 30*time.Second, "the binding to reach the third node", func() bool {
		_, err := far.CoreV1().ConfigMaps("spread").Create(ctx, cm, metav1.CreateOptions{})
		return err == nil
	})
	// Every node authorizes from its own RBAC cache, fed by its own applied
	// stream (as kube-apiserver's informers): each gets there on its own
	// schedule, bounded here.
	for _, n := range nodes {
		c := n.userClientset(t, "alice")
		waitFor(t, 30*time.Second, n.name+" to let alice read the ConfigMap", func() bool {
			_, err := c.CoreV1().ConfigMaps("spread").Get(ctx, "c", metav1.GetOptions{})
			return err == nil
		})
	}
}
