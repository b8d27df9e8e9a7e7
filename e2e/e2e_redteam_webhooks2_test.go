package e2e_test

// Red-team attacks, second round, on admission and conversion webhooks,
// by whoever may write webhook configurations or definitions (class (c)
// of docs/SECURITY.md). kube-apiserver's behaviour is the bar: what kube
// refuses or resets, trustplane must too. Each test performs its attack
// against a real trustplane process and passes when the attack fails
// with nothing changed; a test that fails is a finding.

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trustplane/trustplane/certs"
)

// hookServer is an HTTPS admission and conversion webhook whose answers
// the test decides (admit, convert), keyed by the request path. It keeps
// the raw body of every call, to look for secrets in what it was sent.
type hookServer struct {
	srv   *httptest.Server
	caPEM []byte

	admit   func(path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
	convert func(path string, req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse

	mu    sync.Mutex
	raw   []string
	calls map[string]int
}

func startHookServer(t testing.TB) *hookServer {
	t.Helper()
	h := &hookServer{calls: map[string]int{}}
	h.srv, h.caPEM = startTLSServer(t, http.HandlerFunc(h.serve))
	return h
}

func (h *hookServer) serve(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.raw = append(h.raw, string(body))
	h.calls[r.URL.Path]++
	h.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(r.URL.Path, "/conv") {
		var review apiextensionsv1.ConversionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil || h.convert == nil {
			http.Error(rw, "not a conversion review", http.StatusBadRequest)
			return
		}
		resp := h.convert(r.URL.Path, review.Request)
		if resp == nil { // hang until the caller gives up
			<-r.Context().Done()
			return
		}
		resp.UID = review.Request.UID
		_ = json.NewEncoder(rw).Encode(apiextensionsv1.ConversionReview{TypeMeta: review.TypeMeta, Response: resp})
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil || h.admit == nil {
		http.Error(rw, "not an admission review", http.StatusBadRequest)
		return
	}
	resp := h.admit(r.URL.Path, review.Request)
	if resp == nil { // hang until the caller gives up
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	}
	resp.UID = review.Request.UID
	_ = json.NewEncoder(rw).Encode(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
}

func (h *hookServer) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[path]
}

func (h *hookServer) bodies() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.raw...)
}

func (h *hookServer) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	url := h.srv.URL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: h.caPEM}
}

// mutating is one mutating webhook of h's path for rules, objects
// selected by sel (nil: all).
func (h *hookServer) mutating(name, path string, sel *metav1.LabelSelector, fail admissionregistrationv1.FailurePolicyType,
	rules ...admissionregistrationv1.RuleWithOperations) *admissionregistrationv1.MutatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.MutatingWebhook{{
		Name: name, ClientConfig: h.clientConfig(path), Rules: rules, ObjectSelector: sel, SideEffects: &none, FailurePolicy: &fail,
		AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10), ReinvocationPolicy: &never,
	}}}
}

// validating is mutating's validating twin.
func (h *hookServer) validating(name, path string, sel *metav1.LabelSelector, fail admissionregistrationv1.FailurePolicyType, timeout int32,
	rules ...admissionregistrationv1.RuleWithOperations) *admissionregistrationv1.ValidatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: []admissionregistrationv1.ValidatingWebhook{{
		Name: name, ClientConfig: h.clientConfig(path), Rules: rules, ObjectSelector: sel, SideEffects: &none, FailurePolicy: &fail,
		AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To(timeout),
	}}}
}

func rule(group, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}}}
}

// jsonPatch allows with the JSON patch ops.
func jsonPatch(ops ...map[string]any) *admissionv1.AdmissionResponse {
	raw, _ := json.Marshal(ops)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt, Patch: raw}
}

func op(kind, path string, value any) map[string]any {
	return map[string]any{"op": kind, "path": path, "value": value}
}

// objectMeta reads the metadata of the review's object.
func objectMeta(req *admissionv1.AdmissionRequest) metav1.ObjectMeta {
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	_ = json.Unmarshal(req.Object.Raw, &obj)
	return obj.Metadata
}

// TestRedteamWebhooks2MetadataMutation: a mutating webhook rewrites the
// system metadata of the ConfigMaps it admits. kube-apiserver runs
// mutating admission before it fills in uid and creationTimestamp and
// before the strategy checks the namespace and the immutable fields, and
// resets managedFields a webhook made invalid: so a webhook can move no
// object into another namespace, rename or re-identify no stored object,
// forge no uid (to impersonate another object for the garbage collector
// or revive tokens bound to a deleted object) and no creationTimestamp,
// and store no invalid managedFields.
func TestRedteamWebhooks2MetadataMutation(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns, other = "rt2-meta", "rt2-meta-other"
	createNamespace(t, admin, ns)
	createNamespace(t, admin, other)
	cms := admin.CoreV1().ConfigMaps(ns)
	victim, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := startHookServer(t)
	h.admit = func(_ string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		m := objectMeta(req)
		if req.Operation == admissionv1.Create {
			switch m.Name {
			case "to-other":
				return jsonPatch(op("replace", "/metadata/namespace", other))
			case "forge-uid":
				return jsonPatch(op("add", "/metadata/uid", string(victim.UID)))
			case "forge-created":
				return jsonPatch(op("add", "/metadata/creationTimestamp", "2001-01-01T00:00:00Z"))
			case "bad-managed-set":
				return jsonPatch(op("add", "/metadata/managedFields", []any{map[string]any{
					"manager": "evil", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": "not a set"}}}))
			case "bad-managed":
				return jsonPatch(op("add", "/metadata/managedFields", []any{map[string]any{
					"manager": "evil", "operation": "Bogus", "apiVersion": "v1", "fieldsType": "Bogus", "fieldsV1": map[string]any{"f:nope": "x"}}}))
			}
			return &admissionv1.AdmissionResponse{Allowed: true}
		}
		switch m.Name {
		case "upd-rename":
			return jsonPatch(op("replace", "/metadata/name", "upd-renamed"))
		case "upd-move":
			return jsonPatch(op("replace", "/metadata/namespace", other))
		case "upd-uid":
			return jsonPatch(op("replace", "/metadata/uid", string(victim.UID)))
		case "upd-created":
			return jsonPatch(op("replace", "/metadata/creationTimestamp", "2001-01-01T00:00:00Z"))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"rt2": "meta"}}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		h.mutating("meta.rt2.e2e.trustplane.io", "/meta", sel, admissionregistrationv1.Fail, rule("", "configmaps", admissionregistrationv1.Create, admissionregistrationv1.Update)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labelled := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rt2": "meta"}}}
	}
	waitFor(t, 30*time.Second, "the webhook to be in force", func() bool {
		_, _ = cms.Create(ctx, labelled("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return h.count("/meta") > 0
	})

	t.Run("create into another namespace", func(t *testing.T) {
		_, err := cms.Create(ctx, labelled("to-other"), metav1.CreateOptions{})
		if err == nil {
			t.Errorf("a webhook moved a create into another namespace")
		}
		for _, space := range []string{ns, other} {
			if _, err := admin.CoreV1().ConfigMaps(space).Get(ctx, "to-other", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("to-other stored in %s: %v", space, err)
			}
		}
	})
	t.Run("create with a forged uid", func(t *testing.T) {
		got, err := cms.Create(ctx, labelled("forge-uid"), metav1.CreateOptions{})
		if err != nil {
			return // refused: held
		}
		if got.UID == victim.UID {
			t.Errorf("SUCCEEDED: a webhook gave a new object the uid %s of %s/victim: kube fills uid in after mutating admission", got.UID, ns)
		}
	})
	t.Run("create with a forged creationTimestamp", func(t *testing.T) {
		got, err := cms.Create(ctx, labelled("forge-created"), metav1.CreateOptions{})
		if err != nil {
			return
		}
		if got.CreationTimestamp.Year() < 2020 {
			t.Errorf("SUCCEEDED: a webhook backdated a new object to %v: kube fills creationTimestamp in after mutating admission", got.CreationTimestamp)
		}
	})
	for _, name := range []string{"bad-managed", "bad-managed-set"} {
		t.Run("create with invalid managedFields "+name, func(t *testing.T) { badManaged(t, cms, labelled(name)) })
	}
	// The forged uid revives a token bound to a deleted Secret: the token
	// names the Secret and its uid, which a new Secret of that name
	// carries again.
	t.Run("revive a bound token", func(t *testing.T) { reviveBoundToken(t, n, ns) })
	// kube keeps the stored creationTimestamp over whatever an update
	// says (rest.BeforeUpdate): the update is stored, the time is not.
	t.Run("update upd-created", func(t *testing.T) {
		orig, err := cms.Create(ctx, labelled("upd-created"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		upd := orig.DeepCopy()
		upd.Data = map[string]string{"changed": "yes"}
		if _, err := cms.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			t.Logf("refused: %v", err)
		}
		stored, err := cms.Get(ctx, "upd-created", metav1.GetOptions{})
		if err != nil || stored.UID != orig.UID || !stored.CreationTimestamp.Equal(&orig.CreationTimestamp) {
			t.Errorf("SUCCEEDED: a webhook changed the creationTimestamp of a stored object: %v (%v)", stored.CreationTimestamp, err)
		}
	})
	for _, name := range []string{"upd-rename", "upd-move", "upd-uid"} {
		t.Run("update "+name, func(t *testing.T) {
			// Created with no patch (the webhook patches updates only).
			orig, err := cms.Create(ctx, labelled(name), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before := n.snapshot(t, "configmaps")
			upd := orig.DeepCopy()
			upd.Data = map[string]string{"changed": "yes"}
			_, err = cms.Update(ctx, upd, metav1.UpdateOptions{})
			if err == nil {
				t.Errorf("SUCCEEDED: the update whose webhook rewrote %s was stored", name)
			}
			sameSnapshot(t, before, n.snapshot(t, "configmaps"))
			stored, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil || stored.UID != orig.UID || !stored.CreationTimestamp.Equal(&orig.CreationTimestamp) {
				t.Errorf("the stored object changed: %+v %v", stored, err)
			}
		})
	}
	// Nothing else changed: the victim is as it was, nothing exists in
	// the other namespace, and the node commits.
	if got, err := cms.Get(ctx, "victim", metav1.GetOptions{}); err != nil || got.ResourceVersion != victim.ResourceVersion {
		t.Errorf("the victim changed: %v %v", got, err)
	}
	if l, err := admin.CoreV1().ConfigMaps(other).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) > 1 { // kube-root-ca.crt at most
		t.Errorf("objects in %s: %v %v", other, l, err)
	}
	n.mustBeReady(t)
}

// TestRedteamWebhooks2ScaleMutation: a mutating webhook on a custom
// resource's scale subresource caps spec.replicas at 3, a policy kube
// enforces: kube admits the Scale a client sends and writes the mutated
// Scale into the object. A client that scales to 100 through /scale must
// not get 100 stored past the webhook.
func TestRedteamWebhooks2ScaleMutation(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	write := manifests(t)
	versions := `  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
    subresources:
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
`
	n.mustKubectl("apply", "-f", write("scalers", crdFor("rt2.example", "scalers", versions, "")))
	gvr := schema.GroupVersionResource{Group: "rt2.example", Version: "v1", Resource: "scalers"}
	dc := n.dynamicClient().Resource(gvr)
	waitFor(t, 30*time.Second, "scalers to be served", func() bool {
		_, err := dc.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	if _, err := dc.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rt2.example/v1", "kind": "Xscalers", "metadata": map[string]any{"name": "web"}, "spec": map[string]any{"replicas": int64(1)},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := startHookServer(t)
	h.admit = func(_ string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var scale struct {
			Spec struct {
				Replicas int64 `json:"replicas"`
			} `json:"spec"`
		}
		_ = json.Unmarshal(req.Object.Raw, &scale)
		if scale.Spec.Replicas > 3 {
			return jsonPatch(op("replace", "/spec/replicas", 3))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		h.mutating("cap.rt2.e2e.trustplane.io", "/cap", nil, admissionregistrationv1.Fail, rule("rt2.example", "scalers/scale", admissionregistrationv1.Update)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scaleTo := func(replicas int) error {
		_, err := dc.Patch(ctx, "web", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{}, "scale")
		return err
	}
	waitFor(t, 30*time.Second, "the scale webhook to be in force", func() bool {
		_ = scaleTo(2)
		return h.count("/cap") > 0
	})
	if err := scaleTo(100); err != nil {
		t.Fatalf("scale: %v", err)
	}
	got, err := dc.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 3 {
		t.Errorf("SUCCEEDED: the mutating webhook on scalers/scale was ignored: spec.replicas is %d, kube stores the webhook's 3", r)
	}
}

// TestRedteamWebhooks2CSRSubjectSwap: a mutating webhook swaps the
// request of every CSR it admits for one asking for a trustplane node
// identity, for system:masters, or a kubelet identity, and the CSR's
// username for a node's. The CSR plugins run on what the webhook made,
// so each is refused (or the username is the requester's), and no CSR
// asks for a node identity.
func TestRedteamWebhooks2CSRSubjectSwap(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	h := startHookServer(t)
	swaps := map[string][]byte{
		"swap-node":    csrPEM(t, certs.NodeUserPrefix+"evil", certs.NodeOrganization),
		"swap-org":     csrPEM(t, "harmless", certs.NodeOrganization),
		"swap-masters": csrPEM(t, "root", "system:masters"),
	}
	h.admit = func(_ string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		m := objectMeta(req)
		if p, ok := swaps[m.Name]; ok {
			return jsonPatch(op("replace", "/spec/request", base64.StdEncoding.EncodeToString(p)))
		}
		if m.Name == "swap-user" {
			return jsonPatch(op("replace", "/spec/username", certs.NodeUserPrefix+"evil"),
				op("replace", "/spec/groups", []string{certs.NodeOrganization, "system:masters"}))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		h.mutating("csr.rt2.e2e.trustplane.io", "/csr", nil, admissionregistrationv1.Fail, rule("certificates.k8s.io", "certificatesigningrequests", admissionregistrationv1.Create)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := n.userClientset(t, "alice")
	n.mustKubectl("create", "clusterrole", "csr-writer", "--verb=create,get,list", "--resource=certificatesigningrequests")
	n.mustKubectl("create", "clusterrolebinding", "csr-writer", "--clusterrole=csr-writer", "--user=alice")
	csr := func(name, signer string) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: csrPEM(t, "alice"), SignerName: signer, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		}}
	}
	waitFor(t, 30*time.Second, "the CSR webhook to be in force", func() bool {
		_, _ = alice.CertificatesV1().CertificateSigningRequests().Create(ctx, csr("probe", "example.com/signer"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return h.count("/csr") > 0
	})
	for name := range swaps {
		signers := []string{"example.com/signer", certificatesv1.KubeAPIServerClientSignerName}
		if name == "swap-masters" { // kube refuses system:masters for this signer only
			signers = signers[1:]
		}
		for _, signer := range signers {
			if got, err := alice.CertificatesV1().CertificateSigningRequests().Create(ctx, csr(name, signer), metav1.CreateOptions{}); err == nil {
				t.Errorf("SUCCEEDED: a webhook swapped in a privileged subject for %s (signer %s): stored %s", name, signer, got.Name)
				_ = admin.CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
			}
		}
	}
	got, err := alice.CertificatesV1().CertificateSigningRequests().Create(ctx, csr("swap-user", "example.com/signer"), metav1.CreateOptions{})
	if err == nil && (got.Spec.Username != "alice" || strings.Contains(strings.Join(got.Spec.Groups, ","), "system:masters")) {
		t.Errorf("SUCCEEDED: a webhook forged the CSR's requester: %q %v", got.Spec.Username, got.Spec.Groups)
	}
	l, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l.Items {
		if p, _ := pem.Decode(c.Spec.Request); p != nil {
			if r, err := x509.ParseCertificateRequest(p.Bytes); err == nil && certs.IsNodeSubject(r.Subject.CommonName, r.Subject.Organization) {
				t.Errorf("SUCCEEDED: CSR %s asks for a node identity %v", c.Name, r.Subject)
			}
		}
	}
}

// TestRedteamWebhooks2NoSecretsInReviews: a catch-all validating and
// mutating webhook (every group, resource and subresource, every
// operation) is sent no token: not the token a TokenRequest mints, not a
// TokenReview's, not the signing key; mutating TokenRequest's audiences
// or account is impossible; the reviews still run.
func TestRedteamWebhooks2NoSecretsInReviews(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns = "rt2-secrets"
	createNamespace(t, admin, ns)
	h := startHookServer(t)
	h.admit = func(path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if path == "/all-mutating" && req.Kind.Kind == "TokenRequest" {
			return jsonPatch(op("replace", "/spec/audiences", []string{"https://attacker.example"}),
				op("replace", "/metadata/name", "victim"))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	all := admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}}}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx,
		h.validating("all.rt2.e2e.trustplane.io", "/all", nil, admissionregistrationv1.Ignore, 5, all), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		h.mutating("all-mutating.rt2.e2e.trustplane.io", "/all-mutating", nil, admissionregistrationv1.Ignore, all), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the catch-all webhooks to be in force", func() bool {
		_, _ = admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return h.count("/all") > 0 && h.count("/all-mutating") > 0
	})
	for _, sa := range []string{"attacker", "victim"} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	validatedBefore := h.count("/all")
	var tokens []string
	for range 3 {
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "attacker", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"https://good.example"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tr.Status.Token)
		// The token is the attacker account's, for the audience asked.
		rev, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: []string{"https://good.example"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rev.Status.Authenticated || rev.Status.User.Username != "system:serviceaccount:"+ns+":attacker" {
			t.Errorf("SUCCEEDED: a webhook changed the token minted: %+v", rev.Status)
		}
	}
	if h.count("/all") == validatedBefore {
		t.Errorf("the validating webhook never saw a TokenRequest")
	}
	// A legacy token Secret: its token is what kube shows a webhook, so it
	// is not looked for; the signing key and the minted tokens are.
	for _, b := range h.bodies() {
		for _, tok := range tokens {
			if strings.Contains(b, tok) || strings.Contains(b, strings.Split(tok, ".")[2]) {
				t.Fatalf("SUCCEEDED: a webhook was sent a minted token: %.300s", b)
			}
		}
		if strings.Contains(b, "PRIVATE KEY") || strings.Contains(b, `"TokenReview"`) || strings.Contains(b, "SubjectAccessReview") {
			t.Fatalf("SUCCEEDED: a webhook was sent secret material or a review: %.300s", b)
		}
	}
}

// TestRedteamWebhooks2SlowWebhookIsolation: a webhook that hangs on every
// write of one kind of ConfigMap holds nothing node-wide: while many such
// writes wait on it, writes of other objects, reads and watches carry on,
// and the hung writes end with the webhook's timeout.
func TestRedteamWebhooks2SlowWebhookIsolation(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns = "rt2-slow"
	createNamespace(t, admin, ns)
	h := startHookServer(t)
	release := make(chan struct{})
	var hung sync.WaitGroup
	h.admit = func(path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if objectMeta(req).Name == "probe" {
			return &admissionv1.AdmissionResponse{Allowed: true}
		}
		<-release
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"rt2": "slow"}}
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx,
		h.validating("slow.rt2.e2e.trustplane.io", "/slow", sel, admissionregistrationv1.Fail, 30, rule("", "configmaps", admissionregistrationv1.Create, admissionregistrationv1.Update)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		h.mutating("slow-mutating.rt2.e2e.trustplane.io", "/slow-mutating", sel, admissionregistrationv1.Ignore, rule("", "configmaps", admissionregistrationv1.Create, admissionregistrationv1.Update)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slow := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rt2": "slow"}}}
	}
	waitFor(t, 30*time.Second, "the slow webhooks to be in force", func() bool {
		_, _ = admin.CoreV1().ConfigMaps(ns).Create(ctx, slow("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return h.count("/slow") > 0 && h.count("/slow-mutating") > 0
	})
	w, err := admin.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const hanging = 12
	errs := make(chan error, hanging)
	for i := range hanging {
		hung.Add(1)
		go func() {
			defer hung.Done()
			_, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, slow(fmt.Sprintf("slow-%d", i)), metav1.CreateOptions{})
			errs <- err
		}()
	}
	defer func() { close(release); hung.Wait() }()
	waitFor(t, 30*time.Second, "the writes to wait on the webhook", func() bool { return h.count("/slow-mutating") >= hanging/2 })
	// Other writes and reads, each bounded well below the webhook's hang.
	for i := range 10 {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fast-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("a write the webhook does not guard, while it hangs: %v", err)
		}
		if _, err := admin.CoreV1().Secrets(ns).Create(c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fast-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("a Secret write while the webhook hangs: %v", err)
		}
		if _, err := admin.CoreV1().ConfigMaps(ns).List(c, metav1.ListOptions{}); err != nil {
			t.Errorf("a list while the webhook hangs: %v", err)
		}
		cancel()
	}
	seen := 0
	timeout := time.After(15 * time.Second)
	for seen < 10 {
		select {
		case <-w.ResultChan():
			seen++
		case <-timeout:
			t.Fatalf("the watch delivered %d of 10 Secret events while the webhook hung", seen)
		}
	}
	n.mustBeReady(t)
}

// TestRedteamWebhooks2ConversionLies: a definition's conversion webhook
// answers with objects renamed, re-identified, moved, relabelled, or with
// more objects than it was sent. kube's converter keeps the object's
// identity (only labels and annotations may change) and refuses a wrong
// count; reads of other resources and of the stored version go on; the
// stored object is unchanged.
func TestRedteamWebhooks2ConversionLies(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	write := manifests(t)
	h := startHookServer(t)
	h.convert = func(path string, req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
		resp := &apiextensionsv1.ConversionResponse{Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, o := range req.Objects {
			var u map[string]any
			_ = json.Unmarshal(o.Raw, &u)
			u["apiVersion"] = req.DesiredAPIVersion
			m, _ := u["metadata"].(map[string]any)
			switch path {
			case "/conv-rename":
				m["name"] = "someone-else"
			case "/conv-uid":
				m["uid"] = "00000000-0000-0000-0000-000000000001"
			case "/conv-namespace":
				m["namespace"] = "kube-system"
			case "/conv-rv":
				m["resourceVersion"] = "1"
				m["finalizers"] = []any{"rt2.example/stuck"}
				m["ownerReferences"] = []any{map[string]any{"apiVersion": "v1", "kind": "Namespace", "name": "default", "uid": "00000000-0000-0000-0000-000000000002"}}
			case "/conv-extra":
				raw, _ := json.Marshal(u)
				resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: raw})
			}
			raw, _ := json.Marshal(u)
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: raw})
		}
		return resp
	}
	// A hanging conversion webhook is bounded by kube's converter (30 s a
	// call); it is left out here, where each read would take that long.
	paths := []string{"/conv-rename", "/conv-uid", "/conv-namespace", "/conv-rv", "/conv-extra"}
	plural := func(p string) string { return "lies" + strings.TrimPrefix(p, "/conv-") }
	ca := base64.StdEncoding.EncodeToString(h.caPEM)
	for _, p := range paths {
		n.mustKubectl("apply", "-f", write(plural(p), crdFor("rt2conv.example", plural(p), twoVersions, fmt.Sprintf(`  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        url: %s%s
        caBundle: %s
`, h.srv.URL, p, ca))))
	}
	gvr := func(p, v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "rt2conv.example", Version: v, Resource: plural(p)}
	}
	for _, p := range paths {
		v1 := n.dynamicClient().Resource(gvr(p, "v1"))
		waitFor(t, 30*time.Second, plural(p)+" to be served", func() bool {
			_, err := n.dynamicClient().Resource(gvr(p, "v2")).List(ctx, metav1.ListOptions{})
			return err == nil
		})
		if _, err := v1.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rt2conv.example/v1", "kind": "X" + plural(p), "metadata": map[string]any{"name": "mine", "labels": map[string]any{"a": "b"}},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range paths {
		t.Run(plural(p), func(t *testing.T) {
			v1 := n.dynamicClient().Resource(gvr(p, "v1"))
			v2 := n.dynamicClient().Resource(gvr(p, "v2"))
			before, err := v1.Get(ctx, "mine", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			if got, err := v2.Get(c, "mine", metav1.GetOptions{}); err == nil {
				if got.GetName() != "mine" || got.GetUID() != before.GetUID() || got.GetNamespace() != "" || got.GetResourceVersion() != before.GetResourceVersion() ||
					len(got.GetFinalizers()) > 0 || len(got.GetOwnerReferences()) > 0 {
					t.Errorf("SUCCEEDED: a conversion webhook changed the identity of an object read: %v", got.Object["metadata"])
				}
			}
			if l, err := v2.List(c, metav1.ListOptions{}); err == nil && len(l.Items) != 1 {
				t.Errorf("SUCCEEDED: a conversion webhook changed the number of objects listed: %d", len(l.Items))
			}
			// An update through v2 stores nothing the webhook invented.
			if got, err := v2.Patch(c, "mine", types.MergePatchType, []byte(`{"metadata":{"labels":{"c":"d"}}}`), metav1.PatchOptions{}); err == nil {
				if got.GetName() != "mine" || got.GetUID() != before.GetUID() {
					t.Errorf("SUCCEEDED: an update through a lying converter answered with %v", got.Object["metadata"])
				}
			}
			after, err := v1.Get(ctx, "mine", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if after.GetUID() != before.GetUID() || after.GetName() != "mine" || len(after.GetFinalizers()) > 0 || len(after.GetOwnerReferences()) > 0 {
				t.Errorf("SUCCEEDED: the stored object took the webhook's metadata: %v", after.Object["metadata"])
			}
			if l, err := v1.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
				t.Errorf("stored objects: %v %v", l, err)
			}
			// The stored object can still be deleted.
			if err := v1.Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete: %v", err)
			}
			waitFor(t, 30*time.Second, "mine to be gone", func() bool {
				_, err := v1.Get(ctx, "mine", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
		})
	}
	n.mustBeReady(t)
	if _, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-lies"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node stopped committing: %v", err)
	}
}

// TestRedteamWebhooks2HugeConfigurations: webhook configurations as large
// as an object may be (thousands of webhooks with selectors and match
// conditions), and one with the most expensive match conditions kube
// lets through, cannot crash or wedge the node: writes they do not match
// keep committing, writes they match are decided.
func TestRedteamWebhooks2HugeConfigurations(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	h := startHookServer(t)
	h.admit = func(string, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	none := admissionregistrationv1.SideEffectClassNone
	var hooks []admissionregistrationv1.ValidatingWebhook
	for i := range 1000 {
		hooks = append(hooks, admissionregistrationv1.ValidatingWebhook{
			Name: fmt.Sprintf("h%d.huge.rt2.e2e.trustplane.io", i), ClientConfig: h.clientConfig("/huge"),
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("*", "*", admissionregistrationv1.OperationAll)},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"rt2-huge": fmt.Sprint(i)}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "m", Expression: fmt.Sprintf("object != null && object.metadata.name.startsWith('huge-%d')", i)}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx,
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "huge.rt2.e2e.trustplane.io"}, Webhooks: hooks}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsRequestEntityTooLargeError(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("a huge configuration: %v", err)
	}
	t.Logf("the huge configuration: %v", err)
	// Expensive match conditions: as many as kube allows (64), each a
	// nested comprehension over the object's labels.
	var conds []admissionregistrationv1.MatchCondition
	for i := range 64 {
		conds = append(conds, admissionregistrationv1.MatchCondition{Name: fmt.Sprintf("c%d", i),
			Expression: "object != null && has(object.metadata.labels) && object.metadata.labels.all(k, object.metadata.labels.all(j, object.metadata.labels.all(l, k.size() + j.size() + l.size() >= 0)))"})
	}
	_, err = admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "costly.rt2.e2e.trustplane.io"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "costly.rt2.e2e.trustplane.io", ClientConfig: h.clientConfig("/costly"),
			Rules:           []admissionregistrationv1.RuleWithOperations{rule("", "configmaps", admissionregistrationv1.Create)},
			MatchConditions: conds, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
		}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsInvalid(err) {
		t.Fatalf("a costly configuration: %v", err)
	}
	t.Logf("the costly configuration: %v", err)
	// The node keeps deciding writes: one with many labels that the costly
	// conditions walk, one that matches a single webhook of the huge one.
	labels := map[string]string{}
	for i := range 60 {
		labels[fmt.Sprintf("l%02d", i)] = "v"
	}
	for i := range 5 {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := admin.CoreV1().ConfigMaps("default").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("walk-%d", i), Labels: labels}}, metav1.CreateOptions{})
		cancel()
		if err != nil && !strings.Contains(err.Error(), "cost") && !strings.Contains(err.Error(), "budget") {
			t.Errorf("a write the costly conditions walk: %v", err)
		}
	}
	waitFor(t, 60*time.Second, "a write the huge configuration matches to be decided", func() bool {
		_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "huge-7-x",
			Labels: map[string]string{"rt2-huge": "7"}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && h.count("/huge") > 0
	})
	n.mustBeReady(t)
	if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "after-huge"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the node stopped committing: %v", err)
	}
}

// badManaged creates cm, whose webhook sets invalid managedFields: kube
// resets them to the request's with a warning; refusing the write holds
// too. What is stored must be valid, and stay writable by apply.
func badManaged(t *testing.T, cms interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.ConfigMap, error)
}, cm *corev1.ConfigMap) {
	ctx := context.Background()
	got, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == "evil" {
			t.Errorf("SUCCEEDED: invalid managedFields from a webhook were stored (kube resets them to the request's): %+v", got.ManagedFields)
		}
	}
	apply := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"labels":{"rt2":"meta"}},"data":{"k":"v"}}`, cm.Name)
	if _, err := cms.Patch(ctx, cm.Name, types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "rt2", Force: ptr.To(true)}); err != nil {
		t.Errorf("the object is no longer writable by apply: %v", err)
	}
}

// reviveBoundToken: a token bound to a Secret dies with the Secret; a
// mutating webhook that gives a new Secret of the same name the old uid
// must not bring it back (kube gives every new object a fresh uid after
// mutating admission).
func reviveBoundToken(t *testing.T, n *node, ns string) {
	ctx := context.Background()
	admin := n.clientset()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bound-sa"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bound", Labels: map[string]string{"rt2": "revive"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "bound-sa", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "bound", UID: secret.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	valid := func() bool {
		rev, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rev.Status.Authenticated
	}
	if !valid() {
		t.Fatal("a fresh bound token does not authenticate")
	}
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "bound", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the bound token to be rejected", func() bool { return !valid() })
	h := startHookServer(t)
	h.admit = func(_ string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if objectMeta(req).Name == "bound" {
			return jsonPatch(op("add", "/metadata/uid", string(secret.UID)))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"rt2": "revive"}}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		h.mutating("revive.rt2.e2e.trustplane.io", "/revive", sel, admissionregistrationv1.Fail, rule("", "secrets", admissionregistrationv1.Create)),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the revive webhook to be in force", func() bool {
		_, _ = admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: sel.MatchLabels}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return h.count("/revive") > 0
	})
	again, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bound", Labels: sel.MatchLabels}}, metav1.CreateOptions{})
	if err != nil {
		return // refused: held
	}
	// The cause: a new object carrying the old uid. Without it, the
	// token's binding (name and uid) can never hold again.
	if again.UID == secret.UID {
		t.Errorf("SUCCEEDED: a webhook gave the new Secret the deleted one's uid %s", secret.UID)
	}
	if valid() {
		t.Errorf("SUCCEEDED: a token bound to a deleted Secret authenticates again once a webhook gave a new Secret the old uid %s", secret.UID)
	}
}
