package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// impersonating is a clientset of base acting as imp.
func impersonating(t *testing.T, base *rest.Config, imp rest.ImpersonationConfig) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = imp
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestImpersonation checks kube's impersonation filter under RBAC: the
// impersonate verb on users, groups, uids, userextras and serviceaccounts,
// kube's 403 wording when it is missing, and that the request is then
// authorised as the impersonated user.
func TestImpersonation(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	createNamespace(t, admin, "imp")
	createRole(t, admin, "imp", "cm-reader", rbacRule([]string{"list"}, []string{"configmaps"}))
	bindRole(t, admin, "imp", "team", "Role", "cm-reader", groupSubject("team"))
	createRole(t, admin, "imp", "impersonate-robot", rbacv1.PolicyRule{
		Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{"robot"}})
	createClusterRole(t, admin, "impersonate-bob",
		rbacv1.PolicyRule{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"bob"}},
		rbacv1.PolicyRule{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{"team"}},
		rbacv1.PolicyRule{Verbs: []string{"impersonate"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"uids"}, ResourceNames: []string{"1234"}},
		rbacv1.PolicyRule{Verbs: []string{"impersonate"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"userextras/scopes"}, ResourceNames: []string{"read"}})
	bindClusterRole(t, admin, "carol-impersonates", "impersonate-bob", userSubject("carol"))
	bindRole(t, admin, "imp", "carol-robot", "Role", "impersonate-robot", userSubject("carol"))
	bindRole(t, admin, "imp", "robot", "Role", "cm-reader", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "imp", Name: "robot"})

	t.Run("system:masters may impersonate anyone, and is then that user", func(t *testing.T) {
		asBob := impersonating(t, n.restConfig(), rest.ImpersonationConfig{UserName: "bob"})
		_, err := asBob.CoreV1().ConfigMaps("imp").List(ctx, metav1.ListOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `configmaps is forbidden: User "bob" cannot list resource "configmaps" in API group "" in the namespace "imp"`)
		asTeam := impersonating(t, n.restConfig(), rest.ImpersonationConfig{UserName: "bob", Groups: []string{"team"}})
		if _, err := asTeam.CoreV1().ConfigMaps("imp").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if out, err := n.kubectl("--as", "bob", "--as-group", "team", "get", "configmaps", "-n", "imp"); err != nil {
			t.Fatalf("kubectl --as bob --as-group team: %v\n%s", err, out)
		}
		out, err := n.kubectl("--as", "bob", "get", "configmaps", "-n", "imp")
		if err == nil || !strings.Contains(out, `Error from server (Forbidden): configmaps is forbidden: User "bob" cannot list resource "configmaps"`) {
			t.Fatalf("kubectl --as bob: %v\n%s", err, out)
		}
	})

	carolCfg := n.userConfig(t, "carol")
	cases := []struct {
		name    string
		imp     rest.ImpersonationConfig
		message string // "" = the request is made as the impersonated user
	}{
		{"a user without the verb is refused",
			rest.ImpersonationConfig{UserName: "dave"},
			`users "dave" is forbidden: User "carol" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"a granted user with a granted group",
			rest.ImpersonationConfig{UserName: "bob", Groups: []string{"team"}}, ""},
		{"a group without the verb is refused",
			rest.ImpersonationConfig{UserName: "bob", Groups: []string{"admins"}},
			`groups "admins" is forbidden: User "carol" cannot impersonate resource "groups" in API group "" at the cluster scope`},
		{"a uid without the verb is refused",
			rest.ImpersonationConfig{UserName: "bob", Groups: []string{"team"}, UID: "5678"},
			`uids.authentication.k8s.io "5678" is forbidden: User "carol" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope`},
		{"a granted uid",
			rest.ImpersonationConfig{UserName: "bob", Groups: []string{"team"}, UID: "1234"}, ""},
		{"an extra without the verb is refused",
			rest.ImpersonationConfig{UserName: "bob", Groups: []string{"team"}, Extra: map[string][]string{"scopes": {"write"}}},
			`userextras.authentication.k8s.io "write" is forbidden: User "carol" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope`},
		{"a granted extra",
			rest.ImpersonationConfig{UserName: "bob", Groups: []string{"team"}, Extra: map[string][]string{"scopes": {"read"}}}, ""},
		{"a granted service account",
			rest.ImpersonationConfig{UserName: "system:serviceaccount:imp:robot"}, ""},
		{"a service account in another namespace is refused",
			rest.ImpersonationConfig{UserName: "system:serviceaccount:default:robot"},
			`serviceaccounts "robot" is forbidden: User "carol" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "default"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := impersonating(t, carolCfg, tc.imp).CoreV1().ConfigMaps("imp").List(ctx, metav1.ListOptions{})
			if tc.message == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantAPIError(t, err, 403, metav1.StatusReasonForbidden, tc.message)
		})
	}

	t.Run("kubectl --as without permission", func(t *testing.T) {
		// get --raw: kubectl 1.32's discovery reports a refused discovery
		// request as "Forbidden: unknown" against kube-apiserver too.
		out, err := n.userKubectl(t, "alice", "--as", "bob", "get", "--raw", "/api/v1/namespaces/imp/configmaps")
		if err == nil || !strings.Contains(out, `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`) {
			t.Fatalf("kubectl --as bob as alice: %v\n%s", err, out)
		}
	})
}

// TestImpersonationThroughFollower checks that a write made through a
// follower under impersonation reaches the leader as the impersonated user
// (the leader's escalation check names them) and without the Impersonate
// headers (which the leader would otherwise check again against the
// impersonated user, who may not impersonate).
func TestImpersonationThroughFollower(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	follower := followersOf(nodes, leader)[0]
	ctx := context.Background()
	admin := leader.clientset()
	createNamespace(t, admin, "fwd")
	createRole(t, admin, "fwd", "writer",
		rbacRule([]string{"create"}, []string{"configmaps"}),
		rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}})
	bindRole(t, admin, "fwd", "bob", "Role", "writer", userSubject("bob"))
	// The follower must know the binding before it authorises bob.
	asBob := impersonating(t, follower.restConfig(), rest.ImpersonationConfig{UserName: "bob"})
	waitFor(t, 30*time.Second, "the binding on the follower", func() bool {
		_, err := asBob.CoreV1().ConfigMaps("fwd").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "by-bob"}}, metav1.CreateOptions{})
		return err == nil
	})
	_, err := asBob.RbacV1().Roles("fwd").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "more"},
		Rules:      []rbacv1.PolicyRule{rbacRule([]string{"delete"}, []string{"secrets"})},
	}, metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
		`roles.rbac.authorization.k8s.io "more" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:*`)
}
