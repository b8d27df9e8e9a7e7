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

// TestDeleteBodiesPerKind: a DELETE answers with the deleted object for
// the kinds whose kube storage returns it (Namespace, ServiceAccount, Pod,
// PodTemplate: ReturnDeletedObject) and with a Success Status naming the
// resource for the rest, as kube-apiserver does.
func TestDeleteBodiesPerKind(t *testing.T) {
	n := startNode(t) // the pod needs the default ServiceAccount
	n.scrub(t, "namespace/del-ns", "serviceaccount/del-sa", "pod/del-pod", "podtemplate/del-pt", "configmap/del-cm", "secret/del-secret", "clusterrole/del-cr", "lease/del-lease")
	c := n.httpClient()
	h := jsonHeader("application/json")
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"del-pod"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`
	for _, k := range []struct {
		collection, name, body string
		object                 string // the kind answered, "" for a Status
		group, resource        string // the Status's details
	}{
		{"/api/v1/namespaces", "del-ns", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"del-ns"}}`, "Namespace", "", ""},
		{"/api/v1/namespaces/default/serviceaccounts", "del-sa", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"del-sa"}}`, "ServiceAccount", "", ""},
		{"/api/v1/namespaces/default/pods", "del-pod", pod, "Pod", "", ""},
		{"/api/v1/namespaces/default/podtemplates", "del-pt", `{"apiVersion":"v1","kind":"PodTemplate","metadata":{"name":"del-pt"},"template":{"spec":{"containers":[{"name":"c","image":"busybox"}]}}}`, "PodTemplate", "", ""},
		{"/api/v1/namespaces/default/configmaps", "del-cm", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"del-cm"}}`, "", "", "configmaps"},
		{"/api/v1/namespaces/default/secrets", "del-secret", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"del-secret"}}`, "", "", "secrets"},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "del-cr", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"del-cr"}}`, "", "rbac.authorization.k8s.io", "clusterroles"},
		{"/apis/coordination.k8s.io/v1/namespaces/default/leases", "del-lease", `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"del-lease"}}`, "", "coordination.k8s.io", "leases"},
	} {
		t.Run(k.name, func(t *testing.T) {
			if r := do(t, c, http.MethodPost, n.url()+k.collection, h, []byte(k.body)); r.code != http.StatusCreated {
				t.Fatalf("create: %d %s", r.code, r.body)
			}
			r := do(t, c, http.MethodDelete, n.url()+k.collection+"/"+k.name, map[string]string{"Accept": "application/json"}, nil)
			if r.code != http.StatusOK {
				t.Fatalf("DELETE: %d %s", r.code, r.body)
			}
			var got struct {
				Kind     string `json:"kind"`
				Status   any    `json:"status"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Details *metav1.StatusDetails `json:"details"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			if k.object != "" {
				if got.Kind != k.object || got.Metadata.Name != k.name {
					t.Fatalf("body %s, want the deleted %s", r.body, k.object)
				}
				return
			}
			if got.Kind != "Status" || got.Status != metav1.StatusSuccess || got.Details == nil ||
				got.Details.Name != k.name || got.Details.Group != k.group || got.Details.Kind != k.resource || got.Details.UID == "" {
				t.Fatalf("body %s, want a Success Status naming %s %s", r.body, k.resource, k.name)
			}
		})
	}
}
