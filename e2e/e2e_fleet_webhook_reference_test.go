package e2e_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestFleetReferenceAdmissionReview: the same webhooks, configured on
// trustplane and on a real kube-apiserver v1.33, are sent the same
// AdmissionReviews for the same writes (a create, its dry run, an update,
// a delete): the same kinds, resources, names, operations, options, dry
// runs and objects, mutated by the same patch. What may differ is what
// each server makes up: review and object uids, resourceVersions,
// timestamps and the requester's name. Part of make fleet-test.
func TestFleetReferenceAdmissionReview(t *testing.T) {
	needReference(t)
	ref := startReference(t, referenceOptions{})
	n := startNode(t)
	servers := map[string]kubernetes.Interface{"trustplane": n.clientset(), "kube-apiserver": ref.clientset(t)}
	hooks := map[string]*webhookServer{}
	const ns, scenario = "fleet-reviews", "fleet"
	ctx := context.Background()
	for name, cs := range servers {
		w := startWebhookServer(t)
		hooks[name] = w
		createNamespace(t, cs, ns)
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutatingConfig(w, scenario, "/patch", admissionregistrationv1.NeverReinvocationPolicy), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(configMapWebhook(w, scenario, "/allow")), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		waitWebhook(t, cs, ns, w, scenario, "/patch")
		waitWebhook(t, cs, ns, w, scenario, "/allow")

		cms := cs.CoreV1().ConfigMaps(ns)
		cm := scenarioMap(scenario, "same")
		cm.Data = map[string]string{"k": "v"}
		if _, err := cms.Create(ctx, cm.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "fleet"}); err != nil {
			t.Fatalf("%s: dry run: %v", name, err)
		}
		created, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: "fleet"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		created.Data["k"] = "changed"
		if _, err := cms.Update(ctx, created, metav1.UpdateOptions{FieldManager: "fleet"}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := cms.Delete(ctx, "same", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, path := range []string{"/patch", "/allow"} {
		got, want := comparableReviews(t, hooks["trustplane"].reviews(path, "same")), comparableReviews(t, hooks["kube-apiserver"].reviews(path, "same"))
		if len(got) != len(want) {
			t.Fatalf("%s: trustplane sent %d reviews, kube-apiserver %d", path, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				g, _ := json.MarshalIndent(got[i], "", " ")
				w, _ := json.MarshalIndent(want[i], "", " ")
				t.Errorf("%s review %d differs:\ntrustplane:\n%s\nkube-apiserver:\n%s", path, i, g, w)
			}
		}
	}
}

// comparableReviews are the requests of reviews as JSON values, without
// what each server makes up: uids, resourceVersions, timestamps, the
// requester.
func comparableReviews(t *testing.T, reviews []seenReview) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range reviews {
		b, err := json.Marshal(r.Request)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "uid")
		delete(m, "userInfo")
		for _, o := range []string{"object", "oldObject"} {
			obj, _ := m[o].(map[string]any)
			meta, _ := obj["metadata"].(map[string]any)
			for _, k := range []string{"uid", "resourceVersion", "creationTimestamp"} {
				delete(meta, k)
			}
			mf, _ := meta["managedFields"].([]any)
			for _, e := range mf {
				if e, ok := e.(map[string]any); ok {
					delete(e, "time")
				}
			}
		}
		out = append(out, m)
	}
	return out
}
