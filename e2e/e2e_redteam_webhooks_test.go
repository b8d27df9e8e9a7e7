package e2e_test

// Red-team attacks on admission webhooks, by the attacker classes of
// docs/SECURITY.md: (b) a ServiceAccount token that tries to register a
// webhook, and whoever may write webhook configurations aiming a webhook
// at the node's own ports or at an address outside https. Each test
// performs the attack against a real trustplane process and passes when
// it fails with nothing changed.

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestRedteamWebhookRegisteredByServiceAccount: (b) a ServiceAccount
// token, with every permission a namespace's admin role gives, cannot
// write a webhook configuration, so it cannot see or change another
// user's objects through one.
func TestRedteamWebhookRegisteredByServiceAccount(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns = "redteam-webhook-sa"
	createNamespace(t, admin, ns)
	n.mustKubectl("create", "serviceaccount", "attacker", "-n", ns)
	n.mustKubectl("create", "rolebinding", "attacker-admin", "-n", ns, "--clusterrole=admin", "--serviceaccount="+ns+":attacker")
	token := n.mustKubectl("create", "token", "attacker", "-n", ns)
	cs, err := kubernetes.NewForConfig(n.tokenConfig(t, strings.TrimSpace(token)))
	if err != nil {
		t.Fatal(err)
	}
	w := startWebhookServer(t)
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(configMapWebhook(w, "steal", "/allow")), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a ServiceAccount wrote a validating webhook configuration: %v", err)
	}
	_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutatingConfig(w, "steal", "/patch", admissionregistrationv1.NeverReinvocationPolicy), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a ServiceAccount wrote a mutating webhook configuration: %v", err)
	}
	vs, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Items)+len(ms.Items) != 0 {
		t.Fatalf("webhook configurations exist: %d validating, %d mutating", len(vs.Items), len(ms.Items))
	}
}

// TestRedteamWebhookAimedInside: a webhook configuration aimed at the
// node itself (its Raft port, its own API) or at a plain-http address
// (a cloud metadata service) gets the node nothing: http is refused when
// written, kube's rule; the node's own ports answer a webhook call with a
// failed handshake or a 401, since a node calls webhooks with no
// credential; the write the webhook guards fails (failurePolicy Fail) or
// passes (Ignore) and nothing else changes; the node stays ready and
// keeps committing.
func TestRedteamWebhookAimedInside(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns = "redteam-webhook-inside"
	createNamespace(t, admin, ns)
	vwcs := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()

	plain := "http://169.254.169.254/latest/meta-data/"
	hook := configMapWebhook(startWebhookServer(t), "metadata", "/allow")
	hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &plain}
	_, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{})
	wantAPIError(t, err, 422, metav1.StatusReasonInvalid, `ValidatingWebhookConfiguration.admissionregistration.k8s.io "metadata.e2e.trustplane.io" is invalid: webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]`)

	for _, c := range []struct{ scenario, url string }{
		{"raft", "https://" + n.raftAddr + "/"},
		{"own-api", n.url() + "/api/v1/namespaces/" + ns + "/configmaps"},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			url := c.url
			hook := configMapWebhook(startWebhookServer(t), c.scenario, "/allow")
			// The node's own CA, so that a TLS handshake could succeed
			// where the port speaks TLS to anyone.
			hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte(n.caPEM(t))}
			hook.TimeoutSeconds = ptr.To[int32](2)
			if _, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			before := n.snapshot(t, "configmaps")
			var err error
			waitFor(t, 30*time.Second, "the webhook to be in force", func() bool {
				_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, scenarioMap(c.scenario, "aimed-"+c.scenario), metav1.CreateOptions{})
				return err != nil
			})
			if !strings.Contains(err.Error(), "failed calling webhook") {
				t.Fatalf("a write through a webhook aimed at the node: %v", err)
			}
			sameSnapshot(t, before, n.snapshot(t, "configmaps"))
			n.mustBeReady(t)
			if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, scenarioMap("unguarded", "after-"+c.scenario), metav1.CreateOptions{}); err != nil {
				t.Fatalf("the node stopped committing: %v", err)
			}
		})
	}
}
