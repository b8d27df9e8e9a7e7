package authz

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/trustplane/trustplane/api/registry"
)

func resourceAttrs(u user.Info, verb, group, resource, sub, ns, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: sub,
		Namespace: ns, Name: name, ResourceRequest: true,
	}
}

func urlAttrs(u user.Info, verb, path string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, Path: path}
}

func authed(name string, groups ...string) user.Info {
	return &user.DefaultInfo{Name: name, Groups: append(groups, user.AllAuthenticated)}
}

func TestAuthorize(t *testing.T) {
	w := newWorld(t, true)
	ctx := adminCtx("")
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "secret-reader",
		rule([]string{"get", "list"}, []string{""}, []string{"secrets"})))
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "one-configmap",
		rbac.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}}))
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "pod-logs",
		rule([]string{"get"}, []string{""}, []string{"pods/log"})))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "alice-secrets", "Role", "secret-reader", userSubject("alice")))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "alice-cm", "Role", "one-configmap", userSubject("alice")))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "team-logs", "Role", "pod-logs", groupSubject("team")))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "sa-view", "ClusterRole", "cm-reader", saSubject("ns1", "robot")))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "dangling", "Role", "missing", userSubject("dave")))
	w.create(ctx, registry.ClusterRolesGVR, clusterRole("metrics-reader", rbac.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))
	w.create(ctx, registry.ClusterRolesGVR, clusterRole("cm-reader", rule([]string{"list"}, []string{""}, []string{"configmaps"})))
	w.create(ctx, registry.ClusterRolesGVR, clusterRole("ns-lister", rule([]string{"list"}, []string{""}, []string{"namespaces"})))
	w.create(ctx, registry.ClusterRoleBindingsGVR, clusterRoleBinding("carol-metrics", "metrics-reader", userSubject("carol")))
	w.create(ctx, registry.ClusterRoleBindingsGVR, clusterRoleBinding("carol-ns", "ns-lister", userSubject("carol")))

	alice, bob, carol, dave := authed("alice"), authed("bob", "team"), authed("carol"), authed("dave")
	robot := serviceaccount.UserInfo("ns1", "robot", "")
	cases := []struct {
		name       string
		attrs      authorizer.AttributesRecord
		allow      bool
		wantReason string // substring of the reason
	}{
		{"system:masters may do anything", resourceAttrs(&user.DefaultInfo{Name: "root", Groups: []string{user.SystemPrivilegedGroup}}, "delete", "", "secrets", "", "ns2", "x"), true, ""},
		{"a role grants its verbs in its namespace", resourceAttrs(alice, "list", "", "secrets", "", "ns1", ""), true, `RBAC: allowed by RoleBinding "alice-secrets/ns1"`},
		{"a role grants nothing in another namespace", resourceAttrs(alice, "list", "", "secrets", "", "ns2", ""), false, ""},
		{"a role grants only its verbs", resourceAttrs(alice, "delete", "", "secrets", "", "ns1", "x"), false, ""},
		{"a binding applies to its subject only", resourceAttrs(bob, "list", "", "secrets", "", "ns1", ""), false, ""},
		{"resourceNames allow the named object", resourceAttrs(alice, "get", "", "configmaps", "", "ns1", "a"), true, ""},
		{"resourceNames deny other objects", resourceAttrs(alice, "get", "", "configmaps", "", "ns1", "b"), false, ""},
		{"resourceNames deny collection verbs", resourceAttrs(alice, "list", "", "configmaps", "", "ns1", ""), false, ""},
		{"a group subject binds its members", resourceAttrs(bob, "get", "", "pods", "log", "ns1", "p"), true, ""},
		{"a subresource rule does not grant the parent", resourceAttrs(bob, "get", "", "pods", "", "ns1", "p"), false, ""},
		{"a service account subject binds the service account", resourceAttrs(robot, "list", "", "configmaps", "", "ns1", ""), true, ""},
		{"a ClusterRole through a RoleBinding stays in the namespace", resourceAttrs(robot, "list", "", "configmaps", "", "ns2", ""), false, ""},
		{"nonResourceURLs are granted by path", urlAttrs(carol, "get", "/metrics"), true, ""},
		{"nonResourceURLs are not granted to others", urlAttrs(alice, "get", "/metrics"), false, ""},
		{"a ClusterRoleBinding grants cluster-wide", resourceAttrs(carol, "list", "", "namespaces", "", "", ""), true, ""},
		{"discovery is open to authenticated users", urlAttrs(alice, "get", "/apis/rbac.authorization.k8s.io/v1"), true, ""},
		{"discovery is closed to unauthenticated users", urlAttrs(&user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, "get", "/apis"), false, ""},
		{"version is public", urlAttrs(&user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, "get", "/version"), true, ""},
		{"basic users may review themselves", resourceAttrs(alice, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""), true, ""},
		{"authenticated users may read ClusterTrustBundles", resourceAttrs(alice, "list", "certificates.k8s.io", "clustertrustbundles", "", "", ""), true, ""},
		{"authenticated users may not write ClusterTrustBundles", resourceAttrs(alice, "create", "certificates.k8s.io", "clustertrustbundles", "", "", ""), false, ""},
		{"a binding to a missing role says so", resourceAttrs(dave, "get", "", "secrets", "", "ns1", "x"), false, `role.rbac.authorization.k8s.io "missing" not found`},
		{"controller roles are bound to their service accounts",
			resourceAttrs(serviceaccount.UserInfo("kube-system", "clusterrole-aggregation-controller", ""), "escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "admin"), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, reason, err := w.authz.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatalf("error %v", err)
			}
			if got := d == authorizer.DecisionAllow; got != tc.allow {
				t.Fatalf("allowed = %v (%q), want %v", got, reason, tc.allow)
			}
			if !strings.Contains(reason, tc.wantReason) {
				t.Fatalf("reason %q, want it to contain %q", reason, tc.wantReason)
			}
		})
	}
}

func allowed(t *testing.T, a authorizer.Authorizer, attrs authorizer.AttributesRecord) bool {
	t.Helper()
	d, _, err := a.Authorize(context.Background(), attrs)
	if err != nil {
		t.Fatal(err)
	}
	return d == authorizer.DecisionAllow
}

func TestCacheFollowsAppliedStream(t *testing.T) {
	w := newWorld(t, false)
	alice := authed("alice")
	listSecrets := resourceAttrs(alice, "list", "", "secrets", "", "ns1", "")
	getSecret := resourceAttrs(alice, "get", "", "secrets", "", "ns1", "s")

	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "r", rule([]string{"list"}, []string{""}, []string{"secrets"})))
	if allowed(t, w.authz, listSecrets) {
		t.Fatal("allowed before the binding exists")
	}
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "b", "Role", "r", userSubject("alice")))
	if !allowed(t, w.authz, listSecrets) {
		t.Fatal("not allowed once the binding is applied")
	}
	if allowed(t, w.authz, getSecret) {
		t.Fatal("get allowed before the role grants it")
	}

	// A snapshot taken now holds the role and the binding.
	snap, err := w.back.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}

	cur, err := w.reg.Store(registry.RolesGVR).Get(adminCtx("ns1"), "r", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := cur.(*rbac.Role)
	r.Rules = []rbac.PolicyRule{rule([]string{"get"}, []string{""}, []string{"secrets"})}
	if _, err := w.tryUpdate(adminCtx("ns1"), registry.RolesGVR, r); err != nil {
		t.Fatal(err)
	}
	if !allowed(t, w.authz, getSecret) || allowed(t, w.authz, listSecrets) {
		t.Fatal("an updated role is not what decides")
	}
	w.delete(adminCtx("ns1"), registry.RoleBindingsGVR, "b")
	if allowed(t, w.authz, getSecret) {
		t.Fatal("allowed after the binding was deleted")
	}

	// Restoring the snapshot brings the old role and the binding back
	// without events: the cache must reload.
	if err := w.back.f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !allowed(t, w.authz, listSecrets) || allowed(t, w.authz, getSecret) {
		t.Fatal("the cache does not show the restored state")
	}

	// A cache started on a populated FSM loads what is there.
	late, err := NewCache(w.back.f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if !allowed(t, New(late), listSecrets) {
		t.Fatal("a new cache does not load the existing objects")
	}
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct{ bytes.Buffer }

var _ raft.SnapshotSink = (*memSink)(nil)

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { return nil }
func (s *memSink) Cancel() error { return nil }

func TestRulesFor(t *testing.T) {
	w := newWorld(t, true)
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "r", rule([]string{"watch"}, []string{"apps"}, []string{"deployments"})))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "b", "Role", "r", userSubject("alice")))
	rules, nonResource, incomplete, err := w.authz.RulesFor(context.Background(), authed("alice"), "ns1")
	if err != nil || incomplete {
		t.Fatalf("err %v incomplete %v", err, incomplete)
	}
	var found, discovery bool
	for _, r := range rules {
		found = found || strings.Join(r.GetResources(), ",") == "deployments" && strings.Join(r.GetVerbs(), ",") == "watch"
	}
	for _, r := range nonResource {
		for _, u := range r.GetNonResourceURLs() {
			discovery = discovery || u == "/apis/*"
		}
	}
	if !found || !discovery {
		t.Fatalf("rules %v, non-resource %v: want the role's rule and discovery", rules, nonResource)
	}
}

// BenchmarkAuthorize measures a decision a non-privileged user gets on
// every request, over the bootstrap policy plus a namespaced binding.
func BenchmarkAuthorize(b *testing.B) {
	w := newWorld(b, true)
	w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", "r", rule([]string{"get"}, []string{""}, []string{"secrets"})))
	w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", "b", "Role", "r", userSubject("alice")))
	attrs := resourceAttrs(authed("alice"), "get", "", "secrets", "", "ns1", "s")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, _, _ := w.authz.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow {
				b.Fatal("denied")
			}
		}
	})
}

// TestDecisionsDuringWrites decides while RBAC objects are written; run
// with -race it checks that published snapshots are never modified.
func TestDecisionsDuringWrites(t *testing.T) {
	w := newWorld(t, true)
	attrs := resourceAttrs(authed("alice"), "get", "", "secrets", "", "ns1", "s")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_, _, _ = w.authz.Authorize(context.Background(), attrs)
				_, _, _, _ = w.authz.RulesFor(context.Background(), authed("alice"), "ns1")
			}
		}
	}()
	for i := 0; i < 50; i++ {
		name := "r" + strings.Repeat("x", i%5) + string(rune('a'+i%26))
		w.create(adminCtx("ns1"), registry.RolesGVR, role("ns1", name, rule([]string{"get"}, []string{""}, []string{"secrets"})))
		w.create(adminCtx("ns1"), registry.RoleBindingsGVR, roleBinding("ns1", name, "Role", name, userSubject("alice")))
		w.delete(adminCtx("ns1"), registry.RoleBindingsGVR, name)
	}
	close(stop)
	<-done
	if allowed(t, w.authz, attrs) {
		t.Fatal("allowed after every binding was deleted")
	}
}
