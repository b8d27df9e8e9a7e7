package authz

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	authorizationapi "k8s.io/kubernetes/pkg/apis/authorization"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/fsm"
)

// TestEscalation checks kube's rules for RBAC writes: a user may write a
// role only with rules they hold (or the escalate verb), and a binding only
// to a role whose rules they hold (or the bind verb).
func TestEscalation(t *testing.T) {
	w := newWorld(t, true)
	ctx := adminCtx("")
	rbacAll := rule([]string{"get", "list", "create", "update", "patch", "delete"}, []string{rbac.GroupName}, []string{"roles", "rolebindings", "clusterroles", "clusterrolebindings"})
	// manager may write RBAC objects and read secrets in ns1, nothing else.
	w.create(ctx, registry.ClusterRolesGVR, clusterRole("rbac-writer", rbacAll))
	w.create(ctx, registry.ClusterRolesGVR, clusterRole("secret-reader", rule([]string{"get"}, []string{""}, []string{"secrets"})))
	w.create(ctx, registry.ClusterRolesGVR, clusterRole("secret-deleter", rule([]string{"delete"}, []string{""}, []string{"secrets"})))
	w.create(ctx, registry.ClusterRoleBindingsGVR, clusterRoleBinding("manager-rbac", "rbac-writer", userSubject("manager")))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "manager-secrets", "ClusterRole", "secret-reader", userSubject("manager")))
	// escalator may also escalate roles in ns1; binder may bind secret-deleter in ns1.
	w.create(ctx, registry.ClusterRoleBindingsGVR, clusterRoleBinding("escalator-rbac", "rbac-writer", userSubject("escalator"), userSubject("binder")))
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "escalate", rule([]string{"escalate"}, []string{rbac.GroupName}, []string{"roles"})))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "escalator", "Role", "escalate", userSubject("escalator")))
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "bind", rbac.PolicyRule{
		Verbs: []string{"bind"}, APIGroups: []string{rbac.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"secret-deleter"}}))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "binder", "Role", "bind", userSubject("binder")))
	w.create(ctx, registry.ClusterRolesGVR, &rbac.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "aggregated"},
		AggregationRule: &rbac.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}}})

	manager, escalator, binder := authed("manager"), authed("escalator"), authed("binder")
	held := rule([]string{"get"}, []string{""}, []string{"secrets"})
	notHeld := rule([]string{"delete"}, []string{""}, []string{"secrets"})
	cases := []struct {
		name    string
		ctx     context.Context
		gvr     schema.GroupVersionResource
		obj     runtime.Object
		message string // "" = allowed; else the Forbidden message, * = prefix
	}{
		{"a role with held rules may be created",
			writeCtx(manager, "create", registry.RolesGVR, "ns1", ""), registry.RolesGVR, role("ns1", "ok", held), ""},
		{"a role with rules not held is refused with kube's message",
			writeCtx(manager, "create", registry.RolesGVR, "ns1", ""), registry.RolesGVR, role("ns1", "bad", notHeld),
			`roles.rbac.authorization.k8s.io "bad" is forbidden: user "manager" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
				`{APIGroups:[""], Resources:["secrets"], Verbs:["delete"]}`},
		{"held rules are per namespace",
			writeCtx(manager, "create", registry.RolesGVR, "ns2", ""), registry.RolesGVR, role("ns2", "elsewhere", held),
			`roles.rbac.authorization.k8s.io "elsewhere" is forbidden: user "manager"*`},
		{"the escalate verb allows any rules",
			writeCtx(escalator, "create", registry.RolesGVR, "ns1", ""), registry.RolesGVR, role("ns1", "escalated", notHeld), ""},
		{"the escalate verb is per namespace",
			writeCtx(escalator, "create", registry.RolesGVR, "ns2", ""), registry.RolesGVR, role("ns2", "escalated", notHeld), "*is attempting to grant RBAC permissions not currently held*"},
		{"a cluster role with rules not held is refused",
			writeCtx(manager, "create", registry.ClusterRolesGVR, "", ""), registry.ClusterRolesGVR, clusterRole("bad", held),
			`clusterroles.rbac.authorization.k8s.io "bad" is forbidden: user "manager"*`},
		{"an aggregationRule needs full authority",
			writeCtx(escalator, "create", registry.ClusterRolesGVR, "", ""), registry.ClusterRolesGVR,
			&rbac.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, AggregationRule: &rbac.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"a": "b"}}}}},
			`clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin privileges to use the aggregationRule`},
		{"a binding to a role whose rules are held is allowed",
			writeCtx(manager, "create", registry.RoleBindingsGVR, "ns1", ""), registry.RoleBindingsGVR,
			roleBinding("ns1", "ok", "ClusterRole", "secret-reader", userSubject("other")), ""},
		{"a binding to a role whose rules are not held is refused",
			writeCtx(manager, "create", registry.RoleBindingsGVR, "ns1", ""), registry.RoleBindingsGVR,
			roleBinding("ns1", "bad", "ClusterRole", "secret-deleter", userSubject("other")),
			`rolebindings.rbac.authorization.k8s.io "bad" is forbidden: user "manager" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:` + "\n" +
				`{APIGroups:[""], Resources:["secrets"], Verbs:["delete"]}`},
		{"the bind verb allows binding the named role",
			writeCtx(binder, "create", registry.RoleBindingsGVR, "ns1", ""), registry.RoleBindingsGVR,
			roleBinding("ns1", "bound", "ClusterRole", "secret-deleter", userSubject("other")), ""},
		{"the bind verb is per namespace",
			writeCtx(binder, "create", registry.RoleBindingsGVR, "ns2", ""), registry.RoleBindingsGVR,
			roleBinding("ns2", "bound", "ClusterRole", "secret-deleter", userSubject("other")), "*is attempting to grant RBAC permissions not currently held*"},
		{"a cluster role binding needs the rules cluster-wide",
			writeCtx(manager, "create", registry.ClusterRoleBindingsGVR, "", ""), registry.ClusterRoleBindingsGVR,
			clusterRoleBinding("bad", "secret-reader", userSubject("other")),
			`clusterrolebindings.rbac.authorization.k8s.io "bad" is forbidden: user "manager"*`},
		{"system:masters may bind anything",
			writeCtx(admin, "create", registry.ClusterRoleBindingsGVR, "", ""), registry.ClusterRoleBindingsGVR,
			clusterRoleBinding("root", "cluster-admin", userSubject("other")), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.tryCreate(tc.ctx, tc.gvr, tc.obj)
			checkForbidden(t, err, tc.message)
		})
	}

	t.Run("an update adding rules not held is refused", func(t *testing.T) {
		cur, err := w.reg.Store(registry.RolesGVR).Get(adminCtx("ns1"), "ok", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := cur.(*rbac.Role)
		r.Rules = append(r.Rules, notHeld)
		_, err = w.tryUpdate(writeCtx(manager, "update", registry.RolesGVR, "ns1", "ok"), registry.RolesGVR, r)
		checkForbidden(t, err, `roles.rbac.authorization.k8s.io "ok" is forbidden: user "manager"*`)
	})
	t.Run("an update is checked unless it only changes GC fields", func(t *testing.T) {
		cur, err := w.reg.Store(registry.RolesGVR).Get(adminCtx("ns1"), "escalated", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := cur.(*rbac.Role)
		r.Labels = map[string]string{"team": "a"}
		// manager does not hold delete on secrets: the update is still
		// checked, because labels are not GC fields.
		_, err = w.tryUpdate(writeCtx(manager, "update", registry.RolesGVR, "ns1", "escalated"), registry.RolesGVR, r)
		checkForbidden(t, err, "*is attempting to grant RBAC permissions not currently held*")
		// Owner references and finalizers are, as in kube.
		cur, _ = w.reg.Store(registry.RolesGVR).Get(adminCtx("ns1"), "escalated", &metav1.GetOptions{})
		r = cur.(*rbac.Role)
		r.Finalizers = []string{"example.com/hold"}
		_, err = w.tryUpdate(writeCtx(manager, "update", registry.RolesGVR, "ns1", "escalated"), registry.RolesGVR, r)
		checkForbidden(t, err, "")
	})
	t.Run("changing an aggregated role needs full authority", func(t *testing.T) {
		cur, err := w.reg.Store(registry.ClusterRolesGVR).Get(ctx, "aggregated", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cr := cur.(*rbac.ClusterRole)
		cr.AggregationRule = nil
		_, err = w.tryUpdate(writeCtx(manager, "update", registry.ClusterRolesGVR, "", "aggregated"), registry.ClusterRolesGVR, cr)
		checkForbidden(t, err, `clusterroles.rbac.authorization.k8s.io "aggregated" is forbidden: must have cluster-admin privileges to use the aggregationRule`)
	})
}

func checkForbidden(t *testing.T, err error, message string) {
	t.Helper()
	if message == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want Forbidden", err)
	}
	got := err.Error()
	switch {
	case strings.HasPrefix(message, "*") && strings.HasSuffix(message, "*"):
		if !strings.Contains(got, strings.Trim(message, "*")) {
			t.Fatalf("message %q, want it to contain %q", got, strings.Trim(message, "*"))
		}
	case strings.HasSuffix(message, "*"):
		if !strings.HasPrefix(got, strings.TrimSuffix(message, "*")) {
			t.Fatalf("message %q, want prefix %q", got, strings.TrimSuffix(message, "*"))
		}
	case got != message:
		t.Fatalf("message %q, want %q", got, message)
	}
}

func TestBootstrapReconciles(t *testing.T) {
	w := newWorld(t, true)
	for _, name := range []string{"cluster-admin", "admin", "edit", "view", "system:basic-user", "system:discovery",
		"system:public-info-viewer", "system:service-account-issuer-discovery", "system:controller:clusterrole-aggregation-controller",
		ClusterTrustBundleReader} {
		if _, err := w.cache.GetClusterRole(context.Background(), name); err != nil {
			t.Errorf("cluster role %s: %v", name, err)
		}
	}
	if kv, _, err := w.back.f.Get(BootstrapMarker, 0); err != nil || kv == nil {
		t.Fatalf("marker %v not written: %v", BootstrapMarker, err)
	}
	if _, err := w.cache.GetRole(context.Background(), "kube-system", "extension-apiserver-authentication-reader"); err != nil {
		t.Errorf("namespaced bootstrap role: %v", err)
	}

	// A policy in place is left as it is: nothing is written.
	before := w.back.f.AppliedIndex()
	if err := Bootstrap(context.Background(), w.reg); err != nil {
		t.Fatal(err)
	}
	if after := w.back.f.AppliedIndex(); after != before {
		t.Fatalf("a second bootstrap wrote %d entries", after-before)
	}

	// As in kube, rules removed from an autoupdate role come back, and a
	// role opted out of autoupdate keeps an administrator's change.
	trim := func(name string, annotate bool) int {
		t.Helper()
		cur, err := w.reg.Store(registry.ClusterRolesGVR).Get(adminCtx(""), name, &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cr := cur.(*rbac.ClusterRole)
		full := len(cr.Rules)
		cr.Rules = cr.Rules[:1]
		if annotate {
			cr.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
		}
		if _, err := w.tryUpdate(adminCtx(""), registry.ClusterRolesGVR, cr); err != nil {
			t.Fatal(err)
		}
		return full
	}
	basicUser := trim("system:basic-user", false)
	protected := trim("system:aggregate-to-view", true)
	if err := Bootstrap(context.Background(), w.reg); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.cache.GetClusterRole(context.Background(), "system:basic-user"); len(got.Rules) != basicUser {
		t.Fatalf("system:basic-user has %d rules after reconciling, want %d", len(got.Rules), basicUser)
	}
	if got, _ := w.cache.GetClusterRole(context.Background(), "system:aggregate-to-view"); len(got.Rules) != 1 || protected == 1 {
		t.Fatalf("a protected role was reconciled: %d rules", len(got.Rules))
	}

	// A deleted bootstrap object comes back, before the marker.
	w.delete(adminCtx(""), registry.ClusterRoleBindingsGVR, "system:discovery")
	if err := Bootstrap(context.Background(), w.reg); err != nil {
		t.Fatal(err)
	}
	if kv, _, _ := w.back.f.Get(fsm.Key{Group: rbac.GroupName, Resource: "clusterrolebindings", Name: "system:discovery"}, 0); kv == nil {
		t.Fatal("a deleted bootstrap binding was not recreated")
	}
}

func TestReviews(t *testing.T) {
	w := newWorld(t, true)
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "r", rule([]string{"get"}, []string{""}, []string{"secrets"})))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "b", "Role", "r", userSubject("alice")))
	reviews := map[string]func(ctx context.Context, obj runtime.Object) (runtime.Object, error){}
	for _, v := range w.authz.Reviews() {
		reviews[v.KindName] = func(ctx context.Context, obj runtime.Object) (runtime.Object, error) {
			return v.Create(ctx, "", obj, nil, &metav1.CreateOptions{})
		}
	}
	secretGet := func(ns string) *authorizationapi.ResourceAttributes {
		return &authorizationapi.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets", Name: "s"}
	}
	alice := authed("alice")
	cases := []struct {
		name  string
		kind  string
		ctx   context.Context
		obj   runtime.Object
		allow bool
	}{
		{"SubjectAccessReview asks about another user", "SubjectAccessReview", adminCtx(""),
			&authorizationapi.SubjectAccessReview{Spec: authorizationapi.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: secretGet("ns1")}}, true},
		{"SubjectAccessReview denies what is not granted", "SubjectAccessReview", adminCtx(""),
			&authorizationapi.SubjectAccessReview{Spec: authorizationapi.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: secretGet("ns2")}}, false},
		{"SelfSubjectAccessReview asks about the caller", "SelfSubjectAccessReview", userCtx(alice, ""),
			&authorizationapi.SelfSubjectAccessReview{Spec: authorizationapi.SelfSubjectAccessReviewSpec{ResourceAttributes: secretGet("ns1")}}, true},
		{"LocalSubjectAccessReview asks in its namespace", "LocalSubjectAccessReview", userCtx(admin, "ns1"),
			&authorizationapi.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1"},
				Spec: authorizationapi.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: secretGet("ns1")}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := reviews[tc.kind](tc.ctx, tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			var st authorizationapi.SubjectAccessReviewStatus
			switch o := out.(type) {
			case *authorizationapi.SubjectAccessReview:
				st = o.Status
			case *authorizationapi.SelfSubjectAccessReview:
				st = o.Status
			case *authorizationapi.LocalSubjectAccessReview:
				st = o.Status
			}
			if st.Allowed != tc.allow {
				t.Fatalf("allowed = %v (%q), want %v", st.Allowed, st.Reason, tc.allow)
			}
		})
	}
	t.Run("SelfSubjectRulesReview lists the caller's rules", func(t *testing.T) {
		out, err := reviews["SelfSubjectRulesReview"](userCtx(alice, ""),
			&authorizationapi.SelfSubjectRulesReview{Spec: authorizationapi.SelfSubjectRulesReviewSpec{Namespace: "ns1"}})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range out.(*authorizationapi.SelfSubjectRulesReview).Status.ResourceRules {
			found = found || strings.Join(r.Resources, ",") == "secrets" && strings.Join(r.Verbs, ",") == "get"
		}
		if !found {
			t.Fatalf("rules %+v lack the role's rule", out)
		}
	})
}
