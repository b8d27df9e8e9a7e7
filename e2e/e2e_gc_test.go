package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
)

// Garbage collection (issue 7, point 5): kube-controller-manager's garbage
// collector, run by the leader as system:serviceaccount:kube-system:
// generic-garbage-collector, follows ownerReferences under the three
// propagation policies.

const gcWait = 60 * time.Second

// ownedBy is an ownerReference to owner (a core v1 object of kind).
func ownedBy(kind string, owner metav1.Object, block bool) []metav1.OwnerReference {
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID()}
	if block {
		ref.BlockOwnerDeletion = ptr.To(true)
	}
	return []metav1.OwnerReference{ref}
}

// dependents creates a ConfigMap, a Secret and a ServiceAccount owned by
// owner, each called prefix-<kind>.
func dependents(t *testing.T, cs kubernetes.Interface, ns, prefix, kind string, owner metav1.Object, block bool) {
	t.Helper()
	ctx := context.Background()
	meta := func(suffix string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: prefix + "-" + suffix, OwnerReferences: ownedBy(kind, owner, block)}
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta("cm")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta("secret")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta("sa")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// dependentsMeta reads the three dependents made by dependents; a nil entry
// is one that is gone.
func dependentsMeta(t *testing.T, cs kubernetes.Interface, ns, prefix string) map[string]*metav1.ObjectMeta {
	t.Helper()
	ctx := context.Background()
	out := map[string]*metav1.ObjectMeta{}
	check := func(kind string, m *metav1.ObjectMeta, err error) {
		switch {
		case apierrors.IsNotFound(err):
			out[kind] = nil
		case err != nil:
			t.Fatalf("get %s-%s: %v", prefix, kind, err)
		default:
			out[kind] = m
		}
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, prefix+"-cm", metav1.GetOptions{})
	check("cm", &cm.ObjectMeta, err)
	secret, err := cs.CoreV1().Secrets(ns).Get(ctx, prefix+"-secret", metav1.GetOptions{})
	check("secret", &secret.ObjectMeta, err)
	sa, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, prefix+"-sa", metav1.GetOptions{})
	check("sa", &sa.ObjectMeta, err)
	return out
}

func allGone(m map[string]*metav1.ObjectMeta) bool {
	for _, v := range m {
		if v != nil {
			return false
		}
	}
	return true
}

func TestGarbageCollection(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	const ns = "gc"
	ctlNamespace(t, cs, ns)
	cms := cs.CoreV1().ConfigMaps(ns)

	t.Run("Background", func(t *testing.T) {
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bg-owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependents(t, cs, ns, "bg", "ConfigMap", owner, false)
		// Dependents of an owner that stays are left alone.
		keeper, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keeper"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependents(t, cs, ns, "kept", "ConfigMap", keeper, false)
		for kind, m := range dependentsMeta(t, cs, ns, "bg") {
			if m == nil {
				t.Fatalf("dependent %s vanished before its owner was deleted", kind)
			}
		}
		bg := metav1.DeletePropagationBackground
		if err := cms.Delete(ctx, "bg-owner", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		// The owner goes at once; the collector removes the dependents.
		if _, err := cms.Get(ctx, "bg-owner", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("owner after a Background delete: %v, want NotFound", err)
		}
		waitFor(t, gcWait, "the collector to delete bg-owner's dependents", func() bool {
			return allGone(dependentsMeta(t, cs, ns, "bg"))
		})
		for kind, m := range dependentsMeta(t, cs, ns, "kept") {
			if m == nil || len(m.OwnerReferences) != 1 {
				t.Fatalf("dependent %s of an owner that stays: %+v, want it kept as it was", kind, m)
			}
		}
	})

	t.Run("BackgroundIsTheDefaultAndPodsOwnToo", func(t *testing.T) {
		pods := cs.CoreV1().Pods(ns)
		owner, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-owner"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependents(t, cs, ns, "pod", "Pod", owner, false)
		if err := pods.Delete(ctx, "pod-owner", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, gcWait, "the collector to delete pod-owner's dependents", func() bool {
			return allGone(dependentsMeta(t, cs, ns, "pod"))
		})
	})

	t.Run("Foreground", func(t *testing.T) {
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fg-owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependents(t, cs, ns, "fg", "ConfigMap", owner, true)
		// One blocking dependent is held by a finalizer of its own, so
		// the owner must wait for it.
		if _, err := cs.CoreV1().Secrets(ns).Patch(ctx, "fg-secret", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["`+holdFinalizer+`"]}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		fg := metav1.DeletePropagationForeground
		if err := cms.Delete(ctx, "fg-owner", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, gcWait, "the collector to delete fg-owner's dependents", func() bool {
			d := dependentsMeta(t, cs, ns, "fg")
			return d["cm"] == nil && d["sa"] == nil && d["secret"] != nil && d["secret"].DeletionTimestamp != nil
		})
		got, err := cms.Get(ctx, "fg-owner", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the owner must stay while a blocking dependent exists: %v", err)
		}
		if got.DeletionTimestamp == nil || len(got.Finalizers) != 1 || got.Finalizers[0] != metav1.FinalizerDeleteDependents {
			t.Fatalf("owner while its dependents go: %+v, want it held by %s", got.ObjectMeta, metav1.FinalizerDeleteDependents)
		}
		// The last blocking dependent goes: so does the owner.
		if _, err := cs.CoreV1().Secrets(ns).Patch(ctx, "fg-secret", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, gcWait, "fg-owner to go after its dependents", func() bool {
			_, err := cms.Get(ctx, "fg-owner", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if d := dependentsMeta(t, cs, ns, "fg"); !allGone(d) {
			t.Fatalf("dependents left after the owner went: %v", d)
		}
	})

	t.Run("Orphan", func(t *testing.T) {
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "or-owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependents(t, cs, ns, "or", "ConfigMap", owner, true)
		orphan := metav1.DeletePropagationOrphan
		if err := cms.Delete(ctx, "or-owner", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, gcWait, "or-owner to go once its dependents are orphaned", func() bool {
			_, err := cms.Get(ctx, "or-owner", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		for kind, m := range dependentsMeta(t, cs, ns, "or") {
			if m == nil {
				t.Fatalf("orphaned dependent %s was deleted", kind)
			}
			if len(m.OwnerReferences) != 0 || m.DeletionTimestamp != nil {
				t.Fatalf("orphaned dependent %s: ownerReferences %v, deletionTimestamp %v; want none", kind, m.OwnerReferences, m.DeletionTimestamp)
			}
		}
	})
}

// TestGarbageCollectionKubectl: kubectl's --cascade flag maps onto the
// propagation policies; kubectl waits for the owner to go.
func TestGarbageCollectionKubectl(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	const ns = "gc-kubectl"
	ctlNamespace(t, cs, ns)
	for _, tc := range []struct{ cascade, prefix string }{{"foreground", "kfg"}, {"orphan", "kor"}, {"background", "kbg"}} {
		owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: tc.prefix + "-owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dependents(t, cs, ns, tc.prefix, "ConfigMap", owner, true)
		out, err := n.kubectl("delete", "cm", tc.prefix+"-owner", "-n", ns, "--cascade="+tc.cascade, "--timeout=60s")
		if err != nil || strings.TrimSpace(out) != `configmap "`+tc.prefix+`-owner" deleted` {
			t.Fatalf("kubectl delete --cascade=%s: %v: %q", tc.cascade, err, out)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, tc.prefix+"-owner", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("--cascade=%s: owner still there after kubectl waited: %v", tc.cascade, err)
		}
		switch tc.cascade {
		case "foreground":
			// The owner went only after its blocking dependents.
			if d := dependentsMeta(t, cs, ns, tc.prefix); !allGone(d) {
				t.Fatalf("--cascade=foreground: dependents left after the owner went: %v", d)
			}
		case "orphan":
			for kind, m := range dependentsMeta(t, cs, ns, tc.prefix) {
				if m == nil || len(m.OwnerReferences) != 0 {
					t.Fatalf("--cascade=orphan: dependent %s %+v, want it kept without ownerReferences", kind, m)
				}
			}
		case "background":
			waitFor(t, gcWait, "the dependents of "+tc.prefix+"-owner to go", func() bool { return allGone(dependentsMeta(t, cs, ns, tc.prefix)) })
		}
	}
}

// TestMetadataClient: client-go's metadata client (what the garbage
// collector and the namespace controller use) lists and watches
// PartialObjectMetadata, in protobuf as it asks first.
func TestMetadataClient(t *testing.T) {
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	mc, err := metadata.NewForConfig(n.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	cms := mc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
	if _, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "meta-a", Labels: map[string]string{"k": "v"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("metadata list: %v", err)
	}
	found := false
	for _, item := range list.Items {
		found = found || item.Name == "meta-a" && item.Labels["k"] == "v" && item.UID != ""
	}
	if !found || list.ResourceVersion == "" {
		t.Fatalf("metadata list %+v lacks meta-a or a resourceVersion", list)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("metadata watch: %v", err)
	}
	defer w.Stop()
	if _, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "meta-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := deletionEvent(t, w)
	p, ok := ev.Object.(*metav1.PartialObjectMetadata)
	if ev.Type != watch.Added || !ok || p.Name != "meta-b" || p.ResourceVersion == "" {
		t.Fatalf("metadata watch event %s %#v, want ADDED meta-b as PartialObjectMetadata", ev.Type, ev.Object)
	}
	// The JSON form of a metadata watch, which the client falls back to.
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1&resourceVersion="+list.ResourceVersion,
		map[string]string{"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}, nil)
	var first struct {
		Type   string
		Object metav1.PartialObjectMetadata
	}
	if err := json.NewDecoder(bytes.NewReader(r.body)).Decode(&first); err != nil || first.Type != "ADDED" ||
		first.Object.Kind != "PartialObjectMetadata" || first.Object.APIVersion != "meta.k8s.io/v1" || first.Object.Name != "meta-b" {
		t.Fatalf("JSON metadata watch: %d %v %+v\n%s", r.code, err, first, r.body)
	}
	// Get, patch and delete as the collector does them.
	got, err := cms.Patch(ctx, "meta-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	if err != nil || got.Labels["x"] != "y" {
		t.Fatalf("metadata patch: %v %+v", err, got)
	}
	if err := cms.Delete(ctx, "meta-b", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("metadata delete: %v", err)
	}
	if _, err := cms.Get(ctx, "meta-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("metadata get after delete: %v", err)
	}
}
