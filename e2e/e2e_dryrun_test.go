package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// TestDryRun checks that dryRun=All runs every verb (create, update, patch,
// apply, delete, deletecollection) up to the answer and leaves no trace: no
// resourceVersion changes, no object appears or goes, and a watch sees
// nothing before the next real write. Invalid dryRun values and
// authorisation are answered as for the real request.
func TestDryRun(t *testing.T) {
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	cs := n.clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps("dry")
	for _, name := range []string{"a", "b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"set": "x"}}, Data: map[string]string{"k": "v"}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := n.snapshot(t, "configmaps")
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	dry := []string{metav1.DryRunAll}

	// create
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Data: map[string]string{"k": "v"}},
		metav1.CreateOptions{DryRun: dry, FieldManager: "dry-tester"})
	if err != nil || created.UID == "" || created.CreationTimestamp.IsZero() || created.ResourceVersion != "" ||
		len(created.ManagedFields) != 1 || created.ManagedFields[0].Manager != "dry-tester" {
		t.Fatalf("dry-run create: %v %+v", err, created)
	}
	// update
	a, err := cms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Data["k"] = "changed"
	updated, err := cms.Update(ctx, a, metav1.UpdateOptions{DryRun: dry})
	if err != nil || updated.Data["k"] != "changed" {
		t.Fatalf("dry-run update: %v %+v", err, updated)
	}
	// patches of every type
	for _, p := range []struct {
		pt   types.PatchType
		body string
	}{
		{types.MergePatchType, `{"data":{"k":"merge"}}`},
		{types.StrategicMergePatchType, `{"data":{"k":"smp"}}`},
		{types.JSONPatchType, `[{"op":"replace","path":"/data/k","value":"json"}]`},
	} {
		out, err := cms.Patch(ctx, "a", p.pt, []byte(p.body), metav1.PatchOptions{DryRun: dry})
		if err != nil || out.Data["k"] == "v" {
			t.Fatalf("dry-run %s: %v %+v", p.pt, err, out)
		}
	}
	// apply to an existing object and apply-create
	applied, err := cms.Apply(ctx, corev1ac.ConfigMap("a", "dry").WithData(map[string]string{"k": "applied"}),
		metav1.ApplyOptions{FieldManager: "applier", Force: true, DryRun: dry})
	if err != nil || applied.Data["k"] != "applied" {
		t.Fatalf("dry-run apply: %v %+v", err, applied)
	}
	applied, err = cms.Apply(ctx, corev1ac.ConfigMap("applied-new", "dry").WithData(map[string]string{"k": "v"}),
		metav1.ApplyOptions{FieldManager: "applier", DryRun: dry})
	if err != nil || applied.UID == "" {
		t.Fatalf("dry-run apply-create: %v %+v", err, applied)
	}
	// delete and deletecollection
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{DryRun: dry}); err != nil {
		t.Fatalf("dry-run delete: %v", err)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{DryRun: dry}, metav1.ListOptions{LabelSelector: "set=x"}); err != nil {
		t.Fatalf("dry-run deletecollection: %v", err)
	}

	// No trace: every object and resourceVersion as before ...
	sameSnapshot(t, before, n.snapshot(t, "configmaps"))
	// ... and the first event a watch sees is the next real write.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok || cm.Name != "marker" {
			t.Fatalf("first watch event after the dry runs: %s %+v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch saw nothing, not even the real write")
	}

	t.Run("invalid dryRun value", func(t *testing.T) {
		c := n.httpClient()
		base := n.url() + "/api/v1/namespaces/dry/configmaps"
		for _, tc := range []struct{ method, url, kind, contentType, body string }{
			{http.MethodPost, base + "?dryRun=Bogus", "CreateOptions", "application/json", `{"metadata":{"name":"x"}}`},
			{http.MethodPut, base + "/b?dryRun=Bogus", "UpdateOptions", "application/json", `{"metadata":{"name":"b"}}`},
			{http.MethodPatch, base + "/b?dryRun=Bogus", "PatchOptions", "application/merge-patch+json", `{}`},
			{http.MethodDelete, base + "/b?dryRun=Bogus", "DeleteOptions", "", ""},
			{http.MethodDelete, base + "?dryRun=Bogus", "DeleteOptions", "", ""},
		} {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := do(t, c, tc.method, tc.url, jsonHeader(tc.contentType), body)
			wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				tc.kind+`.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"`)
		}
		sameSnapshot(t, before, withoutMarker(n.snapshot(t, "configmaps")))
	})

	t.Run("authorised as the real request", func(t *testing.T) {
		createRole(t, cs, "dry", "reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}})
		bindRole(t, cs, "dry", "reader", "Role", "reader", userSubject("reader"))
		user := n.userClientset(t, "reader").CoreV1().ConfigMaps("dry")
		waitFor(t, 10*time.Second, "the reader's role", func() bool {
			_, err := user.Get(ctx, "b", metav1.GetOptions{})
			return err == nil
		})
		_, err := user.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{DryRun: dry})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden,
			`configmaps is forbidden: User "reader" cannot create resource "configmaps" in API group "" in the namespace "dry"`)
		err = user.Delete(ctx, "b", metav1.DeleteOptions{DryRun: dry})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden,
			`configmaps "b" is forbidden: User "reader" cannot delete resource "configmaps" in API group "" in the namespace "dry"`)
		_, err = user.Patch(ctx, "b", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{DryRun: dry})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, `configmaps "b" is forbidden: *`)
	})

	// The specification: `?dryRun` with no value allows side effects; the
	// request is a real one (kube-apiserver answers 422, see
	// docs/COMPATIBILITY.md).
	t.Run("dryRun with no value is a real request", func(t *testing.T) {
		c := n.httpClient()
		base := n.url() + "/api/v1/namespaces/dry/configmaps"
		steps := []struct {
			method, url, contentType, body string
			code                           int
		}{
			{http.MethodPost, base + "?dryRun", "application/json", `{"metadata":{"name":"novalue"}}`, http.StatusCreated},
			{http.MethodPut, base + "/novalue?dryRun=", "application/json", `{"metadata":{"name":"novalue"},"data":{"put":"1"}}`, http.StatusOK},
			{http.MethodPatch, base + "/novalue?dryRun", "application/merge-patch+json", `{"data":{"patch":"1"}}`, http.StatusOK},
		}
		for _, st := range steps {
			r := do(t, c, st.method, st.url, jsonHeader(st.contentType), []byte(st.body))
			if r.code != st.code {
				t.Fatalf("%s %s: %d %s, want %d", st.method, st.url, r.code, r.body, st.code)
			}
		}
		got, err := cms.Get(ctx, "novalue", metav1.GetOptions{})
		if err != nil || got.Data["put"] != "1" || got.Data["patch"] != "1" {
			t.Fatalf("after the writes with ?dryRun: %v %+v", err, got)
		}
		if r := do(t, c, http.MethodDelete, base+"/novalue?dryRun", nil, nil); r.code != http.StatusOK {
			t.Fatalf("DELETE ?dryRun: %d %s", r.code, r.body)
		}
		if _, err := cms.Get(ctx, "novalue", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after DELETE ?dryRun: %v, want NotFound", err)
		}
		// An empty value beside All is still a dry run.
		r := do(t, c, http.MethodPost, base+"?dryRun&dryRun=All", jsonHeader("application/json"), []byte(`{"metadata":{"name":"mixed"}}`))
		if r.code != http.StatusCreated {
			t.Fatalf("POST ?dryRun&dryRun=All: %d %s", r.code, r.body)
		}
		if _, err := cms.Get(ctx, "mixed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a dry run with an empty value beside All was stored: %v", err)
		}
	})
}

// withoutMarker drops the marker ConfigMap TestDryRun writes after its
// snapshot.
func withoutMarker(s map[string]string) map[string]string {
	delete(s, "configmaps:dry/marker")
	return s
}
