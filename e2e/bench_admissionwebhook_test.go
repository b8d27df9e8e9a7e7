package e2e_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkAdmissionWebhooks measures ConfigMap creates per second on one
// node (32 client-go clients, JSON) with no webhook, with one validating
// webhook that allows, and with that one plus a mutating webhook that
// patches, in that order, each a real HTTPS server in the test process
// on loopback. What it shows is the node's cost of a webhook call (the
// review's encoding, the TLS round trip, the patch), not a webhook's.
func BenchmarkAdmissionWebhooks(b *testing.B) {
	n := startNode(b)
	cs := clients(b, n, "application/json")
	ctx := context.Background()
	admin := n.clientset()
	w := startWebhookServer(b)
	const scenario = "bench"
	var run atomic.Int64
	for _, step := range []string{"none", "validating", "validating+mutating"} {
		switch step {
		case "validating":
			if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(configMapWebhook(w, scenario, "/allow")), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			waitWebhook(b, admin, "default", w, scenario, "/allow")
		case "validating+mutating":
			if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutatingConfig(w, scenario, "/patch", admissionregistrationv1.NeverReinvocationPolicy), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			waitWebhook(b, admin, "default", w, scenario, "/patch")
		}
		b.Run("webhooks-"+step, func(b *testing.B) {
			prefix := fmt.Sprintf("cm-%d", run.Add(1))
			profileDuring(b, n, func() {
				runClients(b, cs, func(cs *kubernetes.Clientset, i int64) error {
					cm := scenarioMap(scenario, fmt.Sprintf("%s-%d", prefix, i))
					cm.Data = map[string]string{"k": "v"}
					if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
						return fmt.Errorf("create %s with webhooks %s: %w", cm.Name, step, err)
					}
					return nil
				})
			})
		})
	}
}
