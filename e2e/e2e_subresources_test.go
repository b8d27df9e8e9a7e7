package e2e_test

import (
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestStatusSubresource checks the status subresource: it changes only
// status, the main resource changes everything but status, and the
// subresource answers get, update and patch only.
func TestStatusSubresource(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()
	const ns = "subresources"
	createNamespace(t, cs, ns)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Log(err) // the controller may have made it already
	}
	pods := cs.CoreV1().Pods(ns)
	p, err := pods.Create(ctx, minimalPod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Through /status, the phase changes and the image does not.
	p.Status.Phase = corev1.PodRunning
	p.Spec.Containers[0].Image = "changed-through-status"
	p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || p.Spec.Containers[0].Image != "nginx" {
		t.Fatalf("after UpdateStatus: phase %q image %q, want Running and nginx", p.Status.Phase, p.Spec.Containers[0].Image)
	}

	// Through the main resource, the status does not change.
	p.Status.Phase = corev1.PodFailed
	p.Labels = map[string]string{"via": "main"}
	p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || p.Labels["via"] != "main" {
		t.Fatalf("after Update: phase %q labels %v, want Running and via=main", p.Status.Phase, p.Labels)
	}

	// A merge patch on /status.
	p, err = pods.Patch(ctx, "p", types.MergePatchType, []byte(`{"status":{"message":"patched"},"spec":{"activeDeadlineSeconds":5}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Message != "patched" || p.Spec.ActiveDeadlineSeconds != nil {
		t.Fatalf("after status patch: message %q activeDeadlineSeconds %v", p.Status.Message, p.Spec.ActiveDeadlineSeconds)
	}

	c := n.httpClient()
	base := n.url() + "/api/v1/namespaces/" + ns + "/pods/p"
	r := do(t, c, http.MethodGet, base+"/status", nil, nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET status: %d %s", r.code, r.body)
	}
	wantStatus(t, do(t, c, http.MethodDelete, base+"/status", nil, nil), http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "")
	wantStatus(t, do(t, c, http.MethodPost, base+"/status", jsonHeader("application/json"), []byte(`{}`)), http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "")
	wantStatus(t, do(t, c, http.MethodGet, base+"/nonsense", nil, nil), http.StatusNotFound, metav1.StatusReasonNotFound, "")
	wantStatus(t, do(t, c, http.MethodGet, n.url()+"/api/v1/namespaces/"+ns+"/configmaps/x/status", nil, nil), http.StatusNotFound, metav1.StatusReasonNotFound, "")

	list, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range list.APIResources {
		found = found || r.Name == "pods/status"
	}
	if !found {
		t.Fatal("discovery does not list pods/status")
	}
}
