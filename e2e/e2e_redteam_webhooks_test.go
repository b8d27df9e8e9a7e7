package e2e_test

// Red-team attacks on admission and conversion webhooks, by the attacker
// classes of docs/SECURITY.md: (b) a ServiceAccount token that tries to
// register a webhook; whoever may write webhook configurations aiming a
// webhook at the node's own ports or at an address outside https; (c) a
// user who may write definitions aiming a conversion webhook inside. Each test
// performs the attack against a real trustplane process and passes when
// it fails with nothing changed.

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// TestRedteamConversionWebhookAimedInside: (c) a user who may only write
// definitions aims a definition's conversion webhook at the node's Raft
// port and at its own API. Every node calls it with no credential when it
// converts that resource's objects, so the attack reaches no more than
// the attacker's own resource: a write that needs the conversion fails,
// nothing is stored, every other resource and the node itself carry on.
func TestRedteamConversionWebhookAimedInside(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()
	grantDefinitions(t, cs, "mallory", "create", "get", "list")
	write := manifests(t)
	ca := base64.StdEncoding.EncodeToString([]byte(n.caPEM(t)))
	for _, c := range []struct{ plural, url string }{
		{"raftpaints", "https://" + n.raftAddr + "/"},
		{"apipaints", n.url() + "/api/v1/namespaces/default/configmaps"},
	} {
		t.Run(c.plural, func(t *testing.T) {
			def := crdFor("redteam.example", c.plural, twoVersions, fmt.Sprintf(`  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        url: %s
        caBundle: %s
`, c.url, ca))
			if out, err := n.userKubectl(t, "mallory", "create", "-f", write(c.plural, def)); err != nil {
				t.Fatalf("kubectl create: %v\n%s", err, out)
			}
			v2 := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "redteam.example", Version: "v2", Resource: c.plural})
			waitFor(t, 30*time.Second, c.plural+" to be served", func() bool {
				_, err := v2.List(ctx, metav1.ListOptions{})
				return err == nil
			})
			before := n.snapshot(t, "configmaps", "secrets", "serviceaccounts")
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "redteam.example/v2", "kind": "X" + c.plural, "metadata": map[string]any{"name": "aimed"},
			}}
			if _, err := v2.Create(ctx, obj, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "conversion webhook for redteam.example/v2") {
				t.Fatalf("a create converted through the node itself: %v", err)
			}
			v1 := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "redteam.example", Version: "v1", Resource: c.plural})
			if l, err := v1.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
				t.Fatalf("objects after the attack: %v %v", l, err)
			}
			sameSnapshot(t, before, n.snapshot(t, "configmaps", "secrets", "serviceaccounts"))
			n.mustBeReady(t)
			if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, scenarioMap("unguarded", "after-"+c.plural), metav1.CreateOptions{}); err != nil {
				t.Fatalf("the node stopped committing: %v", err)
			}
		})
	}
}
