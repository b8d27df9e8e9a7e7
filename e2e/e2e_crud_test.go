package e2e_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// crudCase is one resource driven through every verb.
type crudCase struct {
	resource   string
	kind       string
	namespaced bool
	// body returns the kind-specific part of a valid object.
	body func() map[string]interface{}
	// smp is a strategic merge patch whose list merge differs from a JSON
	// merge patch; smpCheck verifies the merged result.
	smp      string
	smpCheck func(t *testing.T, obj *unstructured.Unstructured)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func crudCases() []crudCase {
	container := func(name, image string) map[string]interface{} {
		return map[string]interface{}{"name": name, "image": image}
	}
	return []crudCase{
		{
			resource: "namespaces", kind: "Namespace",
			body: func() map[string]interface{} { return nil },
			smp:  `{"metadata":{"labels":{"smp":"yes"}}}`,
			smpCheck: func(t *testing.T, obj *unstructured.Unstructured) {
				if obj.GetLabels()["smp"] != "yes" {
					t.Fatalf("labels after SMP: %v", obj.GetLabels())
				}
			},
		},
		{
			resource: "serviceaccounts", kind: "ServiceAccount", namespaced: true,
			body: func() map[string]interface{} {
				return map[string]interface{}{"secrets": []interface{}{map[string]interface{}{"name": "s1"}}}
			},
			// secrets merge by name: s1 stays, s2 is added.
			smp: `{"secrets":[{"name":"s2"}]}`,
			smpCheck: func(t *testing.T, obj *unstructured.Unstructured) {
				secrets, _, _ := unstructured.NestedSlice(obj.Object, "secrets")
				if len(secrets) != 2 {
					t.Fatalf("secrets after SMP: %v", secrets)
				}
			},
		},
		{
			resource: "secrets", kind: "Secret", namespaced: true,
			body: func() map[string]interface{} {
				return map[string]interface{}{"data": map[string]interface{}{"a": b64("b")}}
			},
			smp: `{"data":{"c":"` + b64("d") + `"}}`,
			smpCheck: func(t *testing.T, obj *unstructured.Unstructured) {
				data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				if data["a"] != b64("b") || data["c"] != b64("d") {
					t.Fatalf("data after SMP: %v", data)
				}
				if typ, _, _ := unstructured.NestedString(obj.Object, "type"); typ != string(corev1.SecretTypeOpaque) {
					t.Fatalf("secret type %q, want the default Opaque", typ)
				}
			},
		},
		{
			resource: "configmaps", kind: "ConfigMap", namespaced: true,
			body: func() map[string]interface{} {
				return map[string]interface{}{"data": map[string]interface{}{"a": "b"}}
			},
			smp: `{"data":{"c":"d"}}`,
			smpCheck: func(t *testing.T, obj *unstructured.Unstructured) {
				data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				if data["a"] != "b" || data["c"] != "d" {
					t.Fatalf("data after SMP: %v", data)
				}
			},
		},
		{
			resource: "pods", kind: "Pod", namespaced: true,
			body: func() map[string]interface{} {
				return map[string]interface{}{"spec": map[string]interface{}{
					"containers": []interface{}{container("a", "nginx"), container("b", "busybox")},
				}}
			},
			// containers merge by name: only a's image changes, b stays.
			smp: `{"spec":{"containers":[{"name":"a","image":"nginx:2"}]}}`,
			smpCheck: func(t *testing.T, obj *unstructured.Unstructured) {
				cs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "containers")
				if len(cs) != 2 {
					t.Fatalf("containers after SMP: %v", cs)
				}
				a, b := cs[0].(map[string]interface{}), cs[1].(map[string]interface{})
				if a["image"] != "nginx:2" || b["image"] != "busybox" {
					t.Fatalf("containers after SMP: %v", cs)
				}
				if a["terminationMessagePath"] != "/dev/termination-log" {
					t.Fatalf("SMP lost a defaulted field: %v", a)
				}
			},
		},
		{
			resource: "podtemplates", kind: "PodTemplate", namespaced: true,
			body: func() map[string]interface{} {
				return map[string]interface{}{"template": map[string]interface{}{"spec": map[string]interface{}{
					"containers": []interface{}{container("a", "nginx")},
				}}}
			},
			// a new container name is added to the list, not replacing it.
			smp: `{"template":{"spec":{"containers":[{"name":"b","image":"busybox"}]}}}`,
			smpCheck: func(t *testing.T, obj *unstructured.Unstructured) {
				cs, _, _ := unstructured.NestedSlice(obj.Object, "template", "spec", "containers")
				if len(cs) != 2 {
					t.Fatalf("containers after SMP: %v", cs)
				}
			},
		},
	}
}

func (c crudCase) object(name string, labels map[string]string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]interface{}{}}
	for k, v := range c.body() {
		obj.Object[k] = v
	}
	obj.SetAPIVersion("v1")
	obj.SetKind(c.kind)
	obj.SetName(name)
	obj.SetLabels(labels)
	return obj
}

// rvOf parses an object's or a list's resourceVersion, which trustplane
// keeps numeric (the raft index).
func rvOf(t testing.TB, obj interface{ GetResourceVersion() string }) uint64 {
	t.Helper()
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil || rv == 0 {
		t.Fatalf("resourceVersion %q of %v is not a positive integer", obj.GetResourceVersion(), obj)
	}
	return rv
}

// TestCRUD drives every writable resource through create, get, list,
// update, the three patch types, delete and deletecollection with client-go.
func TestCRUD(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	dc := n.dynamicClient()
	const ns = "crud"
	if _, err := n.clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range crudCases() {
		t.Run(c.resource, func(t *testing.T) {
			var ri dynamic.ResourceInterface = dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: c.resource})
			prefix := "crud-"
			if c.namespaced {
				ri = dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: c.resource}).Namespace(ns)
				prefix = ""
			}
			name := prefix + c.resource[:len(c.resource)-1]

			// create
			created, err := ri.Create(ctx, c.object(name, map[string]string{"app": "crud"}), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if created.GetUID() == "" || created.GetCreationTimestamp().Time.IsZero() {
				t.Fatalf("create did not set uid and creationTimestamp: %v", created.Object["metadata"])
			}
			if c.namespaced && created.GetNamespace() != ns {
				t.Fatalf("namespace %q, want %q", created.GetNamespace(), ns)
			}
			rv := rvOf(t, created)

			// get
			got, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if got.GetUID() != created.GetUID() || got.GetResourceVersion() != created.GetResourceVersion() {
				t.Fatalf("get: uid/rv %s/%s, created %s/%s", got.GetUID(), got.GetResourceVersion(), created.GetUID(), created.GetResourceVersion())
			}

			// list, with and without a label selector
			list, err := ri.List(ctx, metav1.ListOptions{LabelSelector: "app=crud"})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			if len(list.Items) != 1 || list.Items[0].GetName() != name {
				t.Fatalf("list app=crud: %d items", len(list.Items))
			}
			if lrv, _ := strconv.ParseUint(list.GetResourceVersion(), 10, 64); lrv < rv {
				t.Fatalf("list resourceVersion %d is older than the object's %d", lrv, rv)
			}
			if list.GetKind() != c.kind+"List" {
				t.Fatalf("list kind %q", list.GetKind())
			}

			// update
			got.SetLabels(map[string]string{"app": "crud", "updated": "yes"})
			updated, err := ri.Update(ctx, got, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			if urv := rvOf(t, updated); urv <= rv || updated.GetLabels()["updated"] != "yes" {
				t.Fatalf("update: rv %d (was %d), labels %v", urv, rv, updated.GetLabels())
			}
			rv = rvOf(t, updated)

			// merge patch
			patched, err := ri.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"merge":"yes"}}}`), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("merge patch: %v", err)
			}
			if patched.GetAnnotations()["merge"] != "yes" || patched.GetLabels()["updated"] != "yes" || rvOf(t, patched) <= rv {
				t.Fatalf("merge patch: annotations %v labels %v", patched.GetAnnotations(), patched.GetLabels())
			}
			rv = rvOf(t, patched)

			// JSON patch
			patched, err = ri.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/labels/json","value":"yes"}]`), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("json patch: %v", err)
			}
			if patched.GetLabels()["json"] != "yes" || rvOf(t, patched) <= rv {
				t.Fatalf("json patch: labels %v", patched.GetLabels())
			}
			rv = rvOf(t, patched)

			// JSON patch with a failing test operation: 422, nothing written
			_, err = ri.Patch(ctx, name, types.JSONPatchType,
				[]byte(`[{"op":"test","path":"/metadata/labels/json","value":"no"},{"op":"add","path":"/metadata/labels/bad","value":"x"}]`), metav1.PatchOptions{})
			wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the server rejected our request due to an error in our request")
			if cur, err := ri.Get(ctx, name, metav1.GetOptions{}); err != nil || rvOf(t, cur) != rv || cur.GetLabels()["bad"] != "" {
				t.Fatalf("failed JSON patch changed the object: %v %v", err, cur)
			}

			// strategic merge patch
			patched, err = ri.Patch(ctx, name, types.StrategicMergePatchType, []byte(c.smp), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("strategic merge patch: %v", err)
			}
			c.smpCheck(t, patched)
			if rvOf(t, patched) <= rv {
				t.Fatalf("strategic merge patch did not write")
			}

			// deletecollection with a label selector (namespaces serve none)
			if c.resource != "namespaces" {
				for i, batch := range []string{"dc", "dc", "dc", "keep"} {
					if _, err := ri.Create(ctx, c.object(name+"-"+strconv.Itoa(i), map[string]string{"batch": batch}), metav1.CreateOptions{}); err != nil {
						t.Fatalf("create for deletecollection: %v", err)
					}
				}
				if err := ri.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "batch=dc"}); err != nil {
					t.Fatalf("deletecollection: %v", err)
				}
				left, err := ri.List(ctx, metav1.ListOptions{LabelSelector: "batch"})
				if err != nil {
					t.Fatal(err)
				}
				if len(left.Items) != 1 || left.Items[0].GetLabels()["batch"] != "keep" {
					t.Fatalf("after deletecollection batch=dc: %d items left", len(left.Items))
				}
				if _, err := ri.Get(ctx, name, metav1.GetOptions{}); err != nil {
					t.Fatalf("deletecollection removed an object it did not select: %v", err)
				}
			} else {
				err := ri.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=crud"})
				wantAPIError(t, err, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "")
			}

			// delete
			if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			after, err := ri.Get(ctx, name, metav1.GetOptions{})
			if c.resource == "namespaces" {
				// A deleted namespace is Terminating until the namespace
				// controller has emptied it and removed its finalizer.
				if err == nil {
					phase, _, _ := unstructured.NestedString(after.Object, "status", "phase")
					if phase != "Terminating" || after.GetDeletionTimestamp() == nil {
						t.Fatalf("deleted namespace: phase %q, deletionTimestamp %v", phase, after.GetDeletionTimestamp())
					}
				} else if !apierrors.IsNotFound(err) {
					t.Fatalf("get deleted namespace: %v", err)
				}
				waitFor(t, 90*time.Second, "the deleted namespace to go", func() bool {
					_, err := ri.Get(ctx, name, metav1.GetOptions{})
					return apierrors.IsNotFound(err)
				})
				return
			}
			if !apierrors.IsNotFound(err) {
				t.Fatalf("get after delete: %v", err)
			}
			wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, c.resource+` "`+name+`" not found`)
			err = ri.Delete(ctx, name, metav1.DeleteOptions{})
			wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, c.resource+` "`+name+`" not found`)
		})
	}
}
