package e2e_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// webhookScenarioLabel selects the ConfigMaps one scenario's webhooks see.
const webhookScenarioLabel = "e2e-webhook"

// configMapWebhook is one webhook that sees the writes (create, update,
// delete) of ConfigMaps labelled with scenario, through w's path.
func configMapWebhook(w *webhookServer, scenario, path string) admissionregistrationv1.ValidatingWebhook {
	none := admissionregistrationv1.SideEffectClassNone
	return admissionregistrationv1.ValidatingWebhook{
		Name:         scenario + ".e2e.trustplane.io",
		ClientConfig: w.clientConfig(path),
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}},
		ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{webhookScenarioLabel: scenario}},
		SideEffects:             &none,
		AdmissionReviewVersions: []string{"v1"},
		TimeoutSeconds:          ptr.To[int32](5),
	}
}

// validatingConfig wraps webhooks in a configuration named after the first.
func validatingConfig(hooks ...admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: hooks[0].Name}, Webhooks: hooks}
}

// mutatingConfig is configMapWebhook's webhook as a mutating one, in a
// configuration of its own name.
func mutatingConfig(w *webhookServer, scenario, path string, reinvoke admissionregistrationv1.ReinvocationPolicyType) *admissionregistrationv1.MutatingWebhookConfiguration {
	v := configMapWebhook(w, scenario, path)
	name := strings.TrimSuffix(v.Name, ".e2e.trustplane.io") + "-" + strings.TrimPrefix(path, "/") + ".e2e.trustplane.io"
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.MutatingWebhook{{
		Name: name, ClientConfig: v.ClientConfig, Rules: v.Rules, ObjectSelector: v.ObjectSelector, SideEffects: v.SideEffects,
		AdmissionReviewVersions: v.AdmissionReviewVersions, TimeoutSeconds: v.TimeoutSeconds, ReinvocationPolicy: &reinvoke,
	}}}
}

// scenarioMap is a ConfigMap of scenario.
func scenarioMap(scenario, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{webhookScenarioLabel: scenario}}}
}

// waitWebhook waits until a dry-run create of a ConfigMap of scenario
// reaches w's path: the node's informers have the configuration.
func waitWebhook(t testing.TB, cs kubernetes.Interface, ns string, w *webhookServer, scenario, path string) {
	t.Helper()
	probe := "probe-" + scenario
	waitFor(t, 30*time.Second, "the "+scenario+" webhook to be called", func() bool {
		_, _ = cs.CoreV1().ConfigMaps(ns).Create(context.Background(), scenarioMap(scenario, probe), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return len(w.reviews(path, probe)) > 0
	})
}

// TestE2EAdmissionWebhooks: kube's admission webhook plugins call a real
// HTTPS webhook on one node: denials, patches, match conditions, dry
// runs, both review versions, reinvocation, deletes, timeouts, garbage and
// huge answers under both failure policies; the configuration kinds and
// the token reviews stay out of every webhook's reach; a Service
// reference is refused when written.
func TestE2EAdmissionWebhooks(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit.log")
	n := startNode(t, "--audit-log-path", logPath, "--audit-policy-file", writeAuditPolicy(t))
	runWebhookScenarios(t, n, n, "e2e-webhooks", true)
	w := startWebhookServer(t)
	t.Run("equivalent versions", func(t *testing.T) { webhookMatchPolicy(t, n, w) })
	t.Run("namespace selector and warnings", func(t *testing.T) { webhookNamespacesAndWarnings(t, n, w) })
	noCredentials(t, w)
	// The mutating webhook's patch is in the create's audit event, under
	// kube's annotations.
	if n.isTrustplane() {
		waitFor(t, 15*time.Second, "the patched create's audit event", func() bool {
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range auditEvents(t, string(b)) {
				if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Name != "real" || ev.Stage != "ResponseComplete" {
					continue
				}
				round := ev.Annotations["mutation.webhook.admission.k8s.io/round_0_index_0"]
				patch := ev.Annotations["patch.webhook.admission.k8s.io/round_0_index_0"]
				if !strings.Contains(round, `"configuration":"patch-patch.e2e.trustplane.io"`) || !strings.Contains(round, `"mutated":true`) || !strings.Contains(patch, `"path":"/metadata/labels/patched"`) {
					t.Fatalf("the audit event lacks the webhook's annotations: %v", ev.Annotations)
				}
				return true
			}
			return false
		})
	}
	// MutatingAdmissionPolicies are alpha in 1.33: not served unless
	// --runtime-config turns their version on.
	if _, err := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1alpha1", Resource: "mutatingadmissionpolicies"}).List(context.Background(), metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("v1alpha1 mutatingadmissionpolicies by default: %v", err)
	}
	// The printer is kube's.
	if out := n.mustKubectl("get", "validatingwebhookconfigurations", "beta.e2e.trustplane.io"); !strings.Contains(out, "WEBHOOKS") || !strings.Contains(out, "beta.e2e.trustplane.io   1 ") {
		t.Fatalf("kubectl get:\n%s", out)
	}
	// The webhook metrics are kube's.
	metrics, err := n.clientset().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`apiserver_admission_webhook_admission_duration_seconds_count{name="deny.e2e.trustplane.io",operation="CREATE",rejected="true",type="validating"}`,
		`apiserver_admission_webhook_fail_open_count{name="hostile-hang-ignore.e2e.trustplane.io",type="validating"} 1`,
		`apiserver_admission_webhook_rejection_count{error_type="no_error",name="deny.e2e.trustplane.io",operation="CREATE",rejection_code="400",type="validating"}`,
		`apiserver_admission_webhook_request_total{code="200",name="patch-patch.e2e.trustplane.io",operation="CREATE",rejected="false",type="admit"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(string(metrics), "\n") {
			if strings.Contains(l, "admission_webhook") && !strings.Contains(l, "_bucket") {
				t.Log(l)
			}
		}
	}
}

// noCredentials fails t if any caller presented w a credential: a node
// calls a webhook with none of its own (no client certificate, no token),
// so no webhook can act as the node.
func noCredentials(t *testing.T, w *webhookServer) {
	t.Helper()
	if c := w.credentials(); len(c) > 0 {
		t.Fatalf("a webhook was presented credentials: %v", c)
	}
}

// runWebhookScenarios runs the scenarios through via, configuring and
// checking through on; all, the slow and hostile ones too.
func runWebhookScenarios(t *testing.T, via, on *node, ns string, all bool) {
	ctx := context.Background()
	cs, admin := via.clientset(), on.clientset()
	createNamespace(t, admin, ns)
	w := startWebhookServer(t)
	vwcs := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	mwcs := admin.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cms := cs.CoreV1().ConfigMaps(ns)
	t.Cleanup(func() { noCredentials(t, w) })

	t.Run("deny", func(t *testing.T) {
		hook := configMapWebhook(w, "deny", "/deny")
		hook.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "deny-prefix", Expression: "object.metadata.name.startsWith('deny-') || object.metadata.name.startsWith('probe-')"}}
		if _, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitWebhook(t, cs, ns, w, "deny", "/deny")
		_, err := cms.Create(ctx, scenarioMap("deny", "deny-me"), metav1.CreateOptions{})
		wantAPIError(t, err, 400, "", `admission webhook "deny.e2e.trustplane.io" denied the request: e2e says no`)
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "deny-me", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a denied write was stored: %v", err)
		}
		// The match condition keeps the webhook from other names: never called.
		if _, err := cms.Create(ctx, scenarioMap("deny", "spared"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a write the match condition excludes: %v", err)
		}
		if got := w.reviews("/deny", "spared"); len(got) != 0 {
			t.Fatalf("the webhook was called for a write its match condition excludes: %+v", got)
		}
		r := w.reviews("/deny", "deny-me")
		if len(r) != 1 {
			t.Fatalf("the webhook was called %d times for one write", len(r))
		}
		req := r[0].Request
		if r[0].APIVersion != "admission.k8s.io/v1" || req.Kind.Kind != "ConfigMap" || req.Resource.Resource != "configmaps" ||
			req.Namespace != ns || req.Operation != "CREATE" || *req.DryRun || req.UserInfo.Username == "" || req.Options.Raw == nil {
			t.Fatalf("the review is not kube's: %+v", r[0])
		}
	})

	t.Run("patch and dry run", func(t *testing.T) {
		if _, err := mwcs.Create(ctx, mutatingConfig(w, "patch", "/patch", admissionregistrationv1.NeverReinvocationPolicy), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitWebhook(t, cs, ns, w, "patch", "/patch")
		dry, err := cms.Create(ctx, scenarioMap("patch", "dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if dry.Labels["patched"] != "yes" {
			t.Fatalf("a dry run's answer lacks the webhook's patch: %v", dry.Labels)
		}
		if r := w.reviews("/patch", "dry"); len(r) != 1 || r[0].Request.DryRun == nil || !*r[0].Request.DryRun {
			t.Fatalf("the webhook was not told of the dry run: %+v", r)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a dry run stored its object: %v", err)
		}
		got, err := cms.Create(ctx, scenarioMap("patch", "real"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "real", metav1.GetOptions{})
		if err != nil || got.Labels["patched"] != "yes" || stored.Labels["patched"] != "yes" {
			t.Fatalf("the webhook's patch was not stored: answer %v, stored %v (%v)", got.Labels, stored, err)
		}
	})

	t.Run("a Service reference is refused", func(t *testing.T) {
		hook := configMapWebhook(w, "service", "/allow")
		hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "webhook"}, CABundle: w.caPEM}
		_, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{})
		wantAPIError(t, err, 422, metav1.StatusReasonInvalid, `ValidatingWebhookConfiguration.admissionregistration.k8s.io "service.e2e.trustplane.io" is invalid: webhooks[0].clientConfig.service: Forbidden: trustplane cannot reach Services; give the webhook's address as clientConfig.url`)
		m := mutatingConfig(w, "service", "/allow", admissionregistrationv1.NeverReinvocationPolicy)
		m.Webhooks[0].ClientConfig = hook.ClientConfig
		_, err = mwcs.Create(ctx, m, metav1.CreateOptions{})
		wantAPIError(t, err, 422, metav1.StatusReasonInvalid, `MutatingWebhookConfiguration.admissionregistration.k8s.io "service-allow.e2e.trustplane.io" is invalid: webhooks[0].clientConfig.service: Forbidden: trustplane cannot reach Services; give the webhook's address as clientConfig.url`)
		// admissionregistration.k8s.io/v1 has no side effects but None and NoneOnDryRun.
		some := admissionregistrationv1.SideEffectClassSome
		hook = configMapWebhook(w, "sideeffects", "/allow")
		hook.SideEffects = &some
		_, err = vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{})
		wantAPIError(t, err, 422, metav1.StatusReasonInvalid, `ValidatingWebhookConfiguration.admissionregistration.k8s.io "sideeffects.e2e.trustplane.io" is invalid: webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"`)
		if _, err := vwcs.Get(ctx, "service.e2e.trustplane.io", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a refused configuration was stored: %v", err)
		}
	})

	t.Run("conversion webhook", func(t *testing.T) { conversionWebhook(t, via, on, w) })

	if !all {
		return
	}

	t.Run("v1beta1 reviews", func(t *testing.T) {
		hook := configMapWebhook(w, "beta", "/allow")
		hook.AdmissionReviewVersions = []string{"v1beta1"}
		if _, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitWebhook(t, cs, ns, w, "beta", "/allow")
		if r := w.reviews("/allow", "probe-beta"); r[0].APIVersion != "admission.k8s.io/v1beta1" {
			t.Fatalf("review version %q, want admission.k8s.io/v1beta1", r[0].APIVersion)
		}
	})

	t.Run("reinvocation", func(t *testing.T) {
		// Configurations run in name order: reinvoke-allow before
		// reinvoke-patch, whose patch makes the first run again.
		if _, err := mwcs.Create(ctx, mutatingConfig(w, "reinvoke", "/allow", admissionregistrationv1.IfNeededReinvocationPolicy), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := mwcs.Create(ctx, mutatingConfig(w, "reinvoke", "/patch", admissionregistrationv1.NeverReinvocationPolicy), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitWebhook(t, cs, ns, w, "reinvoke", "/patch")
		waitWebhook(t, cs, ns, w, "reinvoke", "/allow")
		if _, err := cms.Create(ctx, scenarioMap("reinvoke", "twice"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if r := w.reviews("/allow", "twice"); len(r) != 2 || r[1].ObjectLabels["patched"] != "yes" {
			t.Fatalf("the IfNeeded webhook was called %d times (want 2, the second with the patch): %+v", len(r), r)
		}
	})

	t.Run("deletes", func(t *testing.T) {
		if _, err := cms.Create(ctx, scenarioMap("protect", "kept"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		hook := configMapWebhook(w, "protect", "/deny")
		hook.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
		if _, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the delete webhook", func() bool {
			err := cms.Delete(ctx, "kept", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "e2e says no")
		})
		err := cms.Delete(ctx, "kept", metav1.DeleteOptions{})
		wantAPIError(t, err, 400, "", `admission webhook "protect.e2e.trustplane.io" denied the request: e2e says no`)
		if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
			t.Fatalf("a denied delete deleted: %v", err)
		}
		if r := w.reviews("/deny", "kept"); len(r) == 0 || r[len(r)-1].Operation != "DELETE" || r[len(r)-1].Request.OldObject.Raw == nil {
			t.Fatalf("the delete review lacks the old object: %+v", r)
		}
	})

	// Each hostile webhook, under Fail, fails the write within its
	// timeout and stores nothing; under Ignore, the write goes through.
	for _, c := range []struct {
		path, want string
	}{
		{"/hang", "context deadline exceeded"},
		{"/garbage", "failed calling webhook"},
		{"/huge", "the webhook's response is larger than the node accepts"},
	} {
		t.Run("hostile "+c.path, func(t *testing.T) {
			scenario := "hostile-" + strings.TrimPrefix(c.path, "/")
			fail := configMapWebhook(w, scenario, c.path)
			fail.TimeoutSeconds = ptr.To[int32](1)
			fail.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "fail", Expression: "!object.metadata.name.startsWith('ignore-')"}}
			ignore := configMapWebhook(w, scenario+"-ignore", c.path)
			ignore.ObjectSelector = fail.ObjectSelector
			ignore.TimeoutSeconds = ptr.To[int32](1)
			ignore.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			ignore.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "ignore", Expression: "object.metadata.name.startsWith('ignore-')"}}
			if _, err := vwcs.Create(ctx, validatingConfig(fail, ignore), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitWebhook(t, cs, ns, w, scenario, c.path)
			_, err := cms.Create(ctx, scenarioMap(scenario, "refused"), metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("a write through a failing webhook (Fail): %v; want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "xxxxxxxx") {
				t.Fatalf("the error quotes the webhook's answer: %.200s", err)
			}
			if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "refused", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a write refused by its webhook was stored: %v", err)
			}
			if _, err := cms.Create(ctx, scenarioMap(scenario, "ignore-"+scenario), metav1.CreateOptions{}); err != nil {
				t.Fatalf("a write through a failing webhook (Ignore): %v", err)
			}
		})
	}

	t.Run("out of reach", func(t *testing.T) {
		// A webhook that denies every write of the configuration kinds and
		// of the reviews: kube's plugins never send it the configurations,
		// and trustplane never the reviews.
		hook := configMapWebhook(w, "reach", "/deny")
		hook.ObjectSelector = nil
		hook.Rules = []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"admissionregistration.k8s.io", "authentication.k8s.io", "authorization.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
		}}
		if _, err := vwcs.Create(ctx, validatingConfig(hook), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the informers' propagation; nothing to observe
		if err := vwcs.Delete(ctx, "deny.e2e.trustplane.io", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("a configuration could not be deleted past a webhook: %v", err)
		}
		if _, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a review was sent to a webhook: %v", err)
		}
		for k := range w.kinds() {
			if strings.HasPrefix(k, "admissionregistration.k8s.io/") || strings.HasPrefix(k, "authentication.k8s.io/") || strings.HasPrefix(k, "authorization.k8s.io/") {
				t.Fatalf("a webhook was sent a %s", k)
			}
		}
	})
}

// webhookMatchPolicy: a webhook whose rule names only v1 of a custom
// resource is sent a write made through v2, converted to v1, under
// matchPolicy Equivalent (kube's default); one with Exact is not.
func webhookMatchPolicy(t *testing.T, n *node, w *webhookServer) {
	ctx := context.Background()
	write := manifests(t)
	n.mustKubectl("apply", "-f", write("gadgets", crdFor("webhooks.e2e.trustplane.io", "gadgets", twoVersions, "")))
	v2 := n.dynamicClient().Resource(schema.GroupVersionResource{Group: "webhooks.e2e.trustplane.io", Version: "v2", Resource: "gadgets"})
	waitFor(t, 30*time.Second, "gadgets to be served", func() bool {
		_, err := v2.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	v1Only := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"webhooks.e2e.trustplane.io"}, APIVersions: []string{"v1"}, Resources: []string{"gadgets"}},
	}}
	equivalent := configMapWebhook(w, "equivalent", "/allow")
	equivalent.Rules = v1Only
	exact := configMapWebhook(w, "exact", "/deny")
	exact.ObjectSelector = equivalent.ObjectSelector
	exact.Rules = v1Only
	exact.MatchPolicy = ptr.To(admissionregistrationv1.Exact)
	if _, err := n.clientset().AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(equivalent, exact), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gadget := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("webhooks.e2e.trustplane.io/v2")
		u.SetKind("Xgadgets")
		u.SetName(name)
		u.SetLabels(map[string]string{webhookScenarioLabel: "equivalent"})
		return u
	}
	waitFor(t, 30*time.Second, "the webhook on gadgets", func() bool {
		_, _ = v2.Create(ctx, gadget("probe-gadget"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return len(w.reviews("/allow", "probe-gadget")) > 0
	})
	if _, err := v2.Create(ctx, gadget("through-v2"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the Exact webhook matched another version: %v", err)
	}
	r := w.reviews("/allow", "through-v2")
	if len(r) != 1 {
		t.Fatalf("the Equivalent webhook was called %d times", len(r))
	}
	req := r[0].Request
	if req.Kind.Version != "v1" || req.Resource.Version != "v1" || req.RequestKind.Version != "v2" || req.RequestResource.Version != "v2" || r[0].ObjectAPIVersion != "webhooks.e2e.trustplane.io/v1" {
		t.Fatalf("the review is not of v1 (kind %v, resource %v, requestKind %v, object %s)", req.Kind, req.Resource, req.RequestKind, r[0].ObjectAPIVersion)
	}
	if len(w.reviews("/deny", "through-v2")) != 0 {
		t.Fatal("the Exact webhook was called for another version")
	}
}

// webhookNamespacesAndWarnings: a namespaceSelector limits a webhook to
// the namespaces it selects, and a webhook's warnings reach the client.
func webhookNamespacesAndWarnings(t *testing.T, n *node, w *webhookServer) {
	ctx := context.Background()
	admin := n.clientset()
	createNamespace(t, admin, "e2e-webhooks-plain")
	createNamespace(t, admin, "e2e-webhooks-selected")
	if _, err := admin.CoreV1().Namespaces().Patch(ctx, "e2e-webhooks-selected", types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e-webhook-ns":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	hook := configMapWebhook(w, "namespaced", "/warn")
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-webhook-ns": "yes"}}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(hook), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	warnings := &warningCollector{}
	cfg := n.restConfig()
	cfg.WarningHandler = warnings
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitWebhook(t, cs, "e2e-webhooks-selected", w, "namespaced", "/warn")
	if _, err := cs.CoreV1().ConfigMaps("e2e-webhooks-plain").Create(ctx, scenarioMap("namespaced", "unselected"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("e2e-webhooks-selected").Create(ctx, scenarioMap("namespaced", "selected"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(w.reviews("/warn", "unselected")) != 0 || len(w.reviews("/warn", "selected")) != 1 {
		t.Fatalf("the namespace selector did not select: %d, %d calls", len(w.reviews("/warn", "unselected")), len(w.reviews("/warn", "selected")))
	}
	if !slices.Contains(warnings.all(), "e2e warns") {
		t.Fatalf("the webhook's warning did not reach the client: %q", warnings.all())
	}
}

// warningCollector keeps the warnings client-go is sent.
type warningCollector struct {
	mu  sync.Mutex
	got []string
}

func (c *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, text)
}

func (c *warningCollector) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// twoVersions are a definition's versions v1 (stored) and v2, any fields.
const twoVersions = `  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// conversionDefinition is paints (or another plural) of
// conversion.e2e.trustplane.io, v1 stored and v2, converted by w's path.
func conversionDefinition(w *webhookServer, plural, path string) string {
	return crdFor("conversion.e2e.trustplane.io", plural, twoVersions, fmt.Sprintf(`  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        url: %s%s
        caBundle: %s
`, w.srv.URL, path, base64.StdEncoding.EncodeToString(w.caPEM)))
}

// conversionWebhook: a definition with a conversion webhook serves both
// versions, its objects stored in v1 and converted by the webhook, on
// whichever node reads them (via); a webhook that answers garbage fails
// the write with nothing stored.
func conversionWebhook(t *testing.T, via, on *node, w *webhookServer) {
	ctx := context.Background()
	write := manifests(t)
	on.mustKubectl("apply", "-f", write("paints", conversionDefinition(w, "paints", "/convert")))
	on.mustKubectl("apply", "-f", write("broken", conversionDefinition(w, "brokenpaints", "/convert-garbage")))
	gvr := func(plural, version string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "conversion.e2e.trustplane.io", Version: version, Resource: plural}
	}
	v2 := via.dynamicClient().Resource(gvr("paints", "v2"))
	waitFor(t, 30*time.Second, "paints to be served", func() bool {
		_, err := v2.List(ctx, metav1.ListOptions{})
		_, err2 := via.dynamicClient().Resource(gvr("brokenpaints", "v2")).List(ctx, metav1.ListOptions{})
		return err == nil && err2 == nil
	})
	paint := func(kind, name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "conversion.e2e.trustplane.io/v2", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"colour": "red"},
		}}
	}
	if _, err := v2.Create(ctx, paint("Xpaints", "red"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stored, err := on.dynamicClient().Resource(gvr("paints", "v1")).Get(ctx, "red", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(stored.Object, "spec", "color"); c != "red" || stored.GetAPIVersion() != "conversion.e2e.trustplane.io/v1" {
		t.Fatalf("v1 of a v2 create: %v", stored.Object)
	}
	got, err := v2.Get(ctx, "red", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(got.Object, "spec", "colour"); c != "red" {
		t.Fatalf("v2 read back: %v", got.Object)
	}
	list, err := v2.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("v2 list: %v %v", list, err)
	}
	if c, _, _ := unstructured.NestedString(list.Items[0].Object, "spec", "colour"); c != "red" {
		t.Fatalf("v2 list item: %v", list.Items[0].Object)
	}

	_, err = via.dynamicClient().Resource(gvr("brokenpaints", "v2")).Create(ctx, paint("Xbrokenpaints", "broken"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "conversion webhook for conversion.e2e.trustplane.io/v2, Kind=Xbrokenpaints failed") {
		t.Fatalf("a create through a garbage conversion webhook: %v", err)
	}
	if l, err := on.dynamicClient().Resource(gvr("brokenpaints", "v1")).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("a create that failed its conversion stored: %v %v", l, err)
	}
}
