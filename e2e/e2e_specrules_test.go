package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPutCreatesWhereTheStrategyAllows: a PUT of a missing object creates
// it (201) when the kind's strategy allows create-on-update (kube's RBAC
// roles and bindings) and the caller may create; every other kind answers
// 404, and a caller who may only update gets kube's 403 for create.
func TestPutCreatesWhereTheStrategyAllows(t *testing.T) {
	n := startNode(t, "--controllers=false")
	n.scrub(t, "role/made", "role/dry", "role/forbidden", "role/role-updater", "rolebinding/role-updater")
	ctx := context.Background()
	admin := n.clientset()
	c := n.httpClient()
	roles := n.url() + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles"
	role := func(name string) []byte {
		return []byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"` + name + `"},` +
			`"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`)
	}

	t.Run("a missing Role is created with 201", func(t *testing.T) {
		r := do(t, c, http.MethodPut, roles+"/made?fieldManager=putter", jsonHeader("application/json"), role("made"))
		if r.code != http.StatusCreated {
			t.Fatalf("PUT: %d %s", r.code, r.body)
		}
		got, err := admin.RbacV1().Roles("default").Get(ctx, "made", metav1.GetOptions{})
		if err != nil || len(got.Rules) != 1 || got.UID == "" || got.ResourceVersion == "" {
			t.Fatalf("the created role: %+v %v", got, err)
		}
		if len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "putter" || got.ManagedFields[0].Operation != metav1.ManagedFieldsOperationUpdate {
			t.Fatalf("managed fields %+v", got.ManagedFields)
		}
		// The next PUT updates it.
		r = do(t, c, http.MethodPut, roles+"/made", jsonHeader("application/json"), role("made"))
		if r.code != http.StatusOK {
			t.Fatalf("second PUT: %d %s", r.code, r.body)
		}
	})
	t.Run("a dry-run PUT of a missing Role creates nothing", func(t *testing.T) {
		r := do(t, c, http.MethodPut, roles+"/dry?dryRun=All", jsonHeader("application/json"), role("dry"))
		if r.code != http.StatusCreated {
			t.Fatalf("PUT: %d %s", r.code, r.body)
		}
		if _, err := admin.RbacV1().Roles("default").Get(ctx, "dry", metav1.GetOptions{}); err == nil {
			t.Fatal("a dry run created the role")
		}
	})
	t.Run("a missing ConfigMap is 404: its strategy does not create on update", func(t *testing.T) {
		r := do(t, c, http.MethodPut, n.url()+"/api/v1/namespaces/default/configmaps/none", jsonHeader("application/json"),
			[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"none"}}`))
		wantStatus(t, r, http.StatusNotFound, metav1.StatusReasonNotFound, `configmaps "none" not found`)
	})
	t.Run("creating by PUT needs create", func(t *testing.T) {
		createRole(t, admin, "default", "role-updater", rbacv1.PolicyRule{
			APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}, Verbs: []string{"get", "update", "escalate"}})
		bindRole(t, admin, "default", "role-updater", "Role", "role-updater", userSubject("updater"))
		uc := n.userHTTP(t, "updater")
		r := do(t, uc, http.MethodPut, roles+"/forbidden", jsonHeader("application/json"), role("forbidden"))
		wantStatus(t, r, http.StatusForbidden, metav1.StatusReasonForbidden,
			`roles.rbac.authorization.k8s.io "forbidden" is forbidden: User "updater" cannot create resource "roles" in API group "rbac.authorization.k8s.io" in the namespace "default"`)
		if _, err := admin.RbacV1().Roles("default").Get(ctx, "forbidden", metav1.GetOptions{}); err == nil {
			t.Fatal("a forbidden PUT created the role")
		}
		r = do(t, uc, http.MethodPut, roles+"/made", jsonHeader("application/json"), role("made"))
		if r.code != http.StatusOK {
			t.Fatalf("PUT of an existing role by an updater: %d %s", r.code, r.body)
		}
	})
}

// TestDeleteCollectionAnswersStatus: deletecollection deletes what its
// selectors select and answers the specification's 200 Status; a dry run
// answers the same and deletes nothing.
func TestDeleteCollectionAnswersStatus(t *testing.T) {
	n := startNode(t, "--controllers=false")
	n.trustplaneOnly(t, "deletecollection answers the specification's Status (kube: the list it deleted)")
	ctx := context.Background()
	cms := n.clientset().CoreV1().ConfigMaps("default")
	for _, name := range []string{"a", "b", "keep"} {
		labels := map[string]string{"batch": "dc"}
		if name == "keep" {
			labels = nil
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c := n.httpClient()
	url := n.url() + "/api/v1/namespaces/default/configmaps?labelSelector=batch%3Ddc"
	left := func() []string {
		l, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, cm := range l.Items {
			names = append(names, cm.Name)
		}
		return names
	}
	for _, tc := range []struct {
		name, query string
		left        string
	}{
		{"a dry run deletes nothing", "&dryRun=All", "a,b,keep"},
		{"the selected objects are deleted", "", "keep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, c, http.MethodDelete, url+tc.query, nil, nil)
			if r.code != http.StatusOK {
				t.Fatalf("DELETE: %d %s", r.code, r.body)
			}
			var st metav1.Status
			if err := json.Unmarshal(r.body, &st); err != nil {
				t.Fatal(err)
			}
			if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusSuccess || st.Code != http.StatusOK ||
				st.Details == nil || st.Details.Kind != "configmaps" || st.Details.Group != "" {
				t.Fatalf("body %s", r.body)
			}
			if got := strings.Join(left(), ","); got != tc.left {
				t.Fatalf("left %q, want %q", got, tc.left)
			}
		})
	}
}
