package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// Deletion (issue 7, point 5): finalizers hold an object, preconditions,
// the pods' grace period, and the validation of DeleteOptions.

const holdFinalizer = "example.com/hold"

// deletionEvent returns the next event of w, failing after a bounded wait.
func deletionEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch closed early")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30s")
	}
	return watch.Event{}
}

func TestDeletion(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	const ns = "deletion"
	ctlNamespace(t, cs, ns)
	cms := cs.CoreV1().ConfigMaps(ns)

	t.Run("FinalizersHoldTheObject", func(t *testing.T) {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{holdFinalizer}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: cm.ResourceVersion, FieldSelector: fields.OneTermEqualSelector("metadata.name", "held").String()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		// The delete answers 200 with the object, now marked.
		r := do(t, n.httpClient(), http.MethodDelete, n.url()+"/api/v1/namespaces/"+ns+"/configmaps/held", nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("delete: %d %s", r.code, r.body)
		}
		var answered corev1.ConfigMap
		if err := json.Unmarshal(r.body, &answered); err != nil || answered.Kind != "ConfigMap" || answered.DeletionTimestamp == nil {
			t.Fatalf("delete answered %s (%v), want the ConfigMap marked for deletion", r.body, err)
		}
		got, err := cms.Get(ctx, "held", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("a finalizer must hold the object: %v", err)
		}
		if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 0 {
			t.Fatalf("held object: deletionTimestamp %v, deletionGracePeriodSeconds %v; want both set (0 s)", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
		}
		ev := deletionEvent(t, w)
		if m, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Modified || !ok || m.DeletionTimestamp == nil {
			t.Fatalf("first event %s %T, want MODIFIED with a deletionTimestamp", ev.Type, ev.Object)
		}

		// A second delete changes nothing; a create of the same name is
		// refused while the deletion is pending.
		if err := cms.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("second delete: %v", err)
		}
		again, err := cms.Get(ctx, "held", metav1.GetOptions{})
		if err != nil || again.ResourceVersion != got.ResourceVersion {
			t.Fatalf("a second delete wrote: %v (rv %s, was %s)", err, again.ResourceVersion, got.ResourceVersion)
		}
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held"}}, metav1.CreateOptions{})
		wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonAlreadyExists, `object is being deleted: configmaps "held" already exists`)

		// Removing the last finalizer deletes the object in the same write.
		if _, err := cms.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("remove the finalizer: %v", err)
		}
		if _, err := cms.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("get after the last finalizer went: %v, want NotFound", err)
		}
		ev = deletionEvent(t, w)
		if ev.Type != watch.Deleted {
			t.Fatalf("second event %s, want DELETED", ev.Type)
		}
	})

	t.Run("Preconditions", func(t *testing.T) {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pre"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = cms.Delete(ctx, "pre", metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions("not-the-uid")})
		wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(
			`Operation cannot be fulfilled on ConfigMap "pre": the UID in the precondition (not-the-uid) does not match the UID in record (%s). The object might have been deleted and then recreated`, cm.UID))
		err = cms.Delete(ctx, "pre", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: ptr.To("1")}})
		wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(
			`Operation cannot be fulfilled on ConfigMap "pre": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (%s). The object might have been modified`, cm.ResourceVersion))
		if _, err := cms.Get(ctx, "pre", metav1.GetOptions{}); err != nil {
			t.Fatalf("a failed precondition deleted the object: %v", err)
		}
		if err := cms.Delete(ctx, "pre", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion}}); err != nil {
			t.Fatalf("delete with matching preconditions: %v", err)
		}
		if _, err := cms.Get(ctx, "pre", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("get after delete: %v, want NotFound", err)
		}

		// Namespaces check them with the storage layer's wording.
		ctlNamespace(t, cs, "deletion-pre")
		nsObj, err := cs.CoreV1().Namespaces().Get(ctx, "deletion-pre", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = cs.CoreV1().Namespaces().Delete(ctx, "deletion-pre", metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions("not-the-uid")})
		wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(
			`Operation cannot be fulfilled on namespaces "deletion-pre": Precondition failed: UID in precondition: not-the-uid, UID in object meta: %s`, nsObj.UID))
	})

	t.Run("UnscheduledPodGoesAtOnce", func(t *testing.T) {
		pods := cs.CoreV1().Pods(ns)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "unscheduled"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, "unscheduled", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Get(ctx, "unscheduled", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("an unscheduled pod must go at once, whatever the grace period: %v", err)
		}

		// A scheduled pod waits out its grace period (for its kubelet);
		// a zero grace period then deletes it.
		pod.Name, pod.Spec.NodeName = "scheduled", "node-a"
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, "scheduled", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
			t.Fatal(err)
		}
		got, err := pods.Get(ctx, "scheduled", metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 30 {
			t.Fatalf("scheduled pod after a graceful delete: %v %+v, want it kept with a 30 s grace period", err, got.ObjectMeta)
		}
		if err := pods.Delete(ctx, "scheduled", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Get(ctx, "scheduled", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a zero grace period must delete the pod: %v", err)
		}
	})

}

// TestDeletionPropagationFinalizers: Orphan and Foreground hold the owner
// with the garbage collector's finalizer, Background and the legacy
// orphanDependents=false drop it; the validation of conflicting options is
// kube's. No controllers run, so nothing removes the finalizers meanwhile.
func TestDeletionPropagationFinalizers(t *testing.T) {
	n := startNode(t, "--controllers=false")
	cs := n.clientset()
	ctx := context.Background()
	const ns = "default"
	cms := cs.CoreV1().ConfigMaps(ns)
	{
		for _, tc := range []struct {
			name      string
			policy    metav1.DeletionPropagation
			finalizer string
		}{
			{"policy-orphan", metav1.DeletePropagationOrphan, metav1.FinalizerOrphanDependents},
			{"policy-foreground", metav1.DeletePropagationForeground, metav1.FinalizerDeleteDependents},
		} {
			name := tc.name
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{holdFinalizer}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &tc.policy}); err != nil {
				t.Fatal(err)
			}
			got, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if fs := got.Finalizers; len(fs) != 2 || fs[0] != holdFinalizer || fs[1] != tc.finalizer {
				t.Fatalf("%s: finalizers %v, want [%s %s]", tc.policy, fs, holdFinalizer, tc.finalizer)
			}
		}

		r := do(t, n.httpClient(), http.MethodDelete, n.url()+"/api/v1/namespaces/"+ns+"/configmaps/x",
			jsonHeader("application/json"), []byte(`{"orphanDependents":true,"propagationPolicy":"Foreground"}`))
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Foreground": orphanDependents and deletionPropagation cannot be both set`)
		r = do(t, n.httpClient(), http.MethodDelete, n.url()+"/api/v1/namespaces/"+ns+"/configmaps/x?propagationPolicy=Sideways", nil, nil)
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil"`)
	}

	// The deprecated orphanDependents=false on a deletion that is only
	// pending answers 202, as kube-apiserver does.
	r := do(t, n.httpClient(), http.MethodDelete, n.url()+"/api/v1/namespaces/"+ns+"/configmaps/policy-foreground",
		jsonHeader("application/json"), []byte(`{"orphanDependents":false}`))
	if r.code != http.StatusAccepted {
		t.Fatalf("delete with orphanDependents=false of a held object: %d %s, want 202", r.code, r.body)
	}

	// A later delete may change the policy while only finalizers hold
	// the object: Background drops the orphan finalizer.
	bg := metav1.DeletePropagationBackground
	if err := cms.Delete(ctx, "policy-orphan", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	got, err := cms.Get(ctx, "policy-orphan", metav1.GetOptions{})
	if err != nil || len(got.Finalizers) != 1 || got.Finalizers[0] != holdFinalizer {
		t.Fatalf("after a Background delete: %v, finalizers %v, want [%s]", err, got.Finalizers, holdFinalizer)
	}

	// Without other finalizers, Orphan holds the object alone (the
	// deprecated orphanDependents=true does the same) and a Background
	// delete then removes it at once.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "legacy-orphan"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "legacy-orphan", metav1.DeleteOptions{OrphanDependents: ptr.To(true)}); err != nil { //nolint:staticcheck // the legacy field is under test
		t.Fatal(err)
	}
	got, err = cms.Get(ctx, "legacy-orphan", metav1.GetOptions{})
	if err != nil || len(got.Finalizers) != 1 || got.Finalizers[0] != metav1.FinalizerOrphanDependents || got.DeletionTimestamp == nil {
		t.Fatalf("after orphanDependents=true: %v, %+v, want it held by the orphan finalizer", err, got.ObjectMeta)
	}
	if err := cms.Delete(ctx, "legacy-orphan", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "legacy-orphan", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Background delete of an object held only by the orphan finalizer: %v, want NotFound", err)
	}
}
