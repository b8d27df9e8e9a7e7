package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"
)

// The attacks of issue 28's API findings, each against the real binary,
// each shown to fail with nothing changed but the attacker's 429 or
// missing data. One node serves every case but max in flight, whose tiny
// limits get a node of their own.
//
// secWatchCap and secWatchesPerUser are small so that the flood is cheap:
// a tenth of secWatchCap is kept for system identities.
const (
	secWatchCap       = 80
	secWatchesPerUser = 3
	secWatchReserve   = secWatchCap / 10
)

// secCRDs: gizmos with a scale subresource (admission of scale writes,
// custom resource metrics), widgets (deleted, for the storage gauge) and
// levers (created during the watch flood, the parameters of a policy
// whose informer must still get its watch).
const secCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.sec.example.com}
spec:
  group: sec.example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.sec.example.com}
spec:
  group: sec.example.com
  scope: Cluster
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

const secLeversCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: levers.sec.example.com}
spec:
  group: sec.example.com
  scope: Cluster
  names: {plural: levers, singular: lever, kind: Lever}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// secScalePolicy admits scale writes of gizmos only when admission sees
// autoscaling/v1 Scales, and names the kind it saw in its denial.
const secScalePolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: sec-scale}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [sec.example.com], apiVersions: ["*"], operations: [UPDATE], resources: [gizmos/scale]}
  validations:
  - expression: "object.apiVersion == 'autoscaling/v1' && object.kind == 'Scale' && oldObject.kind == 'Scale' && object.spec.replicas <= 5"
    messageExpression: "'a ' + object.kind + ' of ' + string(object.spec.replicas) + ' replicas is refused'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: sec-scale}
spec: {policyName: sec-scale, validationActions: [Deny]}
`

// secLeakPolicy quotes a password from the object in its denial message
// and its audit annotation, for Secrets and ConfigMaps in namespaces
// labelled sec-audit.
const secLeakPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: sec-leak}
spec:
  matchConstraints:
    namespaceSelector: {matchLabels: {sec-audit: "true"}}
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets, configmaps]}
  validations:
  - expression: "!has(object.data) || !('password' in object.data)"
    messageExpression: "'refused: ' + string(object.data['password'])"
  auditAnnotations:
  - {key: leak, valueExpression: "has(object.data) && 'password' in object.data ? string(object.data['password']) : 'none'"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: sec-leak}
spec: {policyName: sec-leak, validationActions: [Deny, Audit]}
`

// secLeverPolicy refuses ConfigMaps named as its Lever parameter says, in
// namespaces labelled sec-params: it is in force only once the policy
// plugin's informer of levers has synced.
const secLeverPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: sec-lever}
spec:
  paramKind: {apiVersion: sec.example.com/v1, kind: Lever}
  matchConstraints:
    namespaceSelector: {matchLabels: {sec-params: "true"}}
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "object.metadata.name != params.spec.forbidden"
    messageExpression: "'the lever forbids ' + params.spec.forbidden"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: sec-lever}
spec:
  policyName: sec-lever
  validationActions: [Deny]
  paramRef: {name: lever, parameterNotFoundAction: Deny}
`

func TestE2ESecurityAPI(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	n := startNode(t, "--max-watches", fmt.Sprint(secWatchCap), "--max-watches-per-user", fmt.Sprint(secWatchesPerUser),
		"--audit-log-path", auditPath, "--audit-policy-file", writeAuditPolicy(t))
	n.trustplaneOnly(t, "its flags and audit log")
	write := manifests(t)
	n.mustKubectl("apply", "-f", write("crds", secCRDs))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/gizmos.sec.example.com", "crd/widgets.sec.example.com")

	t.Run("scale admission sees an autoscaling/v1 Scale", func(t *testing.T) { secScaleAdmission(t, n, write) })
	t.Run("custom resource requests are in the request metrics", func(t *testing.T) { secCustomMetrics(t, n) })
	t.Run("a deleted definition leaves no apiserver_storage_objects series", func(t *testing.T) { secDeletedStorageSeries(t, n) })
	t.Run("no Secret data reaches the audit log through a policy", func(t *testing.T) { secAuditLeak(t, n, write, auditPath) })
	t.Run("a watch flood stops at its own limits, the node's informers still watch", func(t *testing.T) { secWatchFlood(t, n, write) })
	n.kill() // the next node needs the CPU
	t.Run("401 and 403 floods wait for max in flight", secInFlightFloods)
}

// secScaleAdmission: a policy on gizmos/scale sees kind Scale, as kube
// hands admission the Scale, and not the Gizmo.
func secScaleAdmission(t *testing.T, n *node, write func(name, text string) string) {
	admin := n.httpClient()
	const gizmos = "/apis/sec.example.com/v1/namespaces/default/gizmos"
	if r := do(t, admin, http.MethodPost, n.url()+gizmos, jsonHeader("application/json"),
		[]byte(`{"apiVersion":"sec.example.com/v1","kind":"Gizmo","metadata":{"name":"g"},"spec":{"replicas":1}}`)); r.code != http.StatusCreated {
		t.Fatalf("create a gizmo: %d %s", r.code, r.body)
	}
	n.mustKubectl("apply", "-f", write("scale-policy", secScalePolicy))
	scale := func(replicas int) httpResult {
		return do(t, admin, http.MethodPatch, n.url()+gizmos+"/g/scale", jsonHeader("application/merge-patch+json"),
			[]byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)))
	}
	// The policy is in force once a scale to 7 is refused; its message
	// names the kind admission saw.
	var refused httpResult
	waitFor(t, 30*time.Second, "the scale policy to refuse 7 replicas", func() bool {
		refused = scale(7)
		return refused.code >= 400
	})
	if st := failureStatus(t, refused); !strings.Contains(st.Message, "a Scale of 7 replicas is refused") {
		t.Fatalf("the refusal of 7 replicas: %d %s", refused.code, refused.body)
	}
	// With the Gizmo, object.kind == 'Scale' would refuse this too.
	if r := scale(3); r.code != http.StatusOK {
		t.Fatalf("a scale to 3 replicas: %d %s", r.code, r.body)
	}
	if out := n.mustKubectl("get", "gizmos.sec.example.com", "g", "-o", "jsonpath={.spec.replicas}"); out != "3" {
		t.Fatalf("replicas after the scale: %q", out)
	}
}

// secCustomMetrics: the requests of secScaleAdmission are recorded under
// the custom resource's group, version, resource and subresource, and
// its objects are counted.
func secCustomMetrics(t *testing.T, n *node) {
	fams := metricFamilies(t, n.httpClient(), n)
	for _, want := range []map[string]string{
		{"group": "sec.example.com", "version": "v1", "resource": "gizmos", "subresource": "", "verb": "POST", "code": "201"},
		{"group": "sec.example.com", "version": "v1", "resource": "gizmos", "subresource": "scale", "verb": "PATCH", "code": "200"},
	} {
		if v, ok := value(fams, "apiserver_request_total", want); !ok || v < 1 {
			t.Errorf("apiserver_request_total%v = %v (found %v), want the requests made", want, v, ok)
		}
	}
	if _, ok := value(fams, "apiserver_storage_objects", map[string]string{"resource": "gizmos.sec.example.com"}); !ok {
		t.Error("apiserver_storage_objects has no series of gizmos.sec.example.com")
	}
}

// secDeletedStorageSeries: once widgets' definition is deleted, its
// apiserver_storage_objects series goes.
func secDeletedStorageSeries(t *testing.T, n *node) {
	admin := n.httpClient()
	if r := do(t, admin, http.MethodPost, n.url()+"/apis/sec.example.com/v1/widgets", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"sec.example.com/v1","kind":"Widget","metadata":{"name":"w"}}`)); r.code != http.StatusCreated {
		t.Fatalf("create a widget: %d %s", r.code, r.body)
	}
	widgets := map[string]string{"resource": "widgets.sec.example.com"}
	if _, ok := value(metricFamilies(t, admin, n), "apiserver_storage_objects", widgets); !ok {
		t.Fatal("apiserver_storage_objects has no series of widgets.sec.example.com while they are served")
	}
	n.mustKubectl("delete", "crd", "widgets.sec.example.com", "--wait=true", "--timeout=30s")
	waitFor(t, 30*time.Second, "the widgets' apiserver_storage_objects series to go", func() bool {
		_, ok := value(metricFamilies(t, admin, n), "apiserver_storage_objects", widgets)
		return !ok
	})
}

// secAuditLeak: a policy whose messageExpression and auditAnnotation quote
// a Secret's data leaves none of it in the audit log file; the client is
// still told (as by kube). The same policy on a ConfigMap is recorded as
// kube records it, which shows the file would hold what the policy wrote.
func secAuditLeak(t *testing.T, n *node, write func(name, text string) string, auditPath string) {
	admin := n.httpClient()
	const password = "tp-sec-api-hunter2"
	encoded := base64.StdEncoding.EncodeToString([]byte(password))
	if r := do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"sec-audit","labels":{"sec-audit":"true"}}}`)); r.code != http.StatusCreated {
		t.Fatalf("namespace: %d %s", r.code, r.body)
	}
	n.mustKubectl("apply", "-f", write("leak-policy", secLeakPolicy))
	create := func(resource, name, data string) httpResult {
		kind := map[string]string{"secrets": "Secret", "configmaps": "ConfigMap"}[resource]
		return do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces/sec-audit/"+resource, jsonHeader("application/json"),
			[]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":%q,"metadata":{"name":%q},"data":{"password":%q}}`, kind, name, data)))
	}
	var cm httpResult
	for i := 0; i < 300; i++ { // until the policy is in force (informers), at most 30 s
		if cm = create("configmaps", fmt.Sprintf("cm-%d", i), password); cm.code >= 400 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cm.code < 400 || !strings.Contains(string(cm.body), "refused: "+password) {
		t.Fatalf("the policy never refused a ConfigMap with its message: %d %s", cm.code, cm.body)
	}
	// The policy sees a Secret's data as kube's does: base64.
	secret := create("secrets", "s", encoded)
	if secret.code < 400 || !strings.Contains(string(secret.body), "refused: "+encoded) {
		t.Fatalf("the Secret's refusal, which the client is told as kube tells it: %d %s", secret.code, secret.body)
	}
	var secretEv, cmEv *auditv1.Event
	waitFor(t, 15*time.Second, "the refused creates' audit events", func() bool {
		b, err := os.ReadFile(auditPath)
		if err != nil {
			t.Fatal(err)
		}
		secretEv, cmEv = nil, nil
		for _, ev := range auditEvents(t, string(b)) {
			if ev.Verb != "create" || ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil || ev.ObjectRef.Namespace != "sec-audit" {
				continue
			}
			switch ev.ObjectRef.Resource {
			case "secrets":
				secretEv = &ev
			case "configmaps":
				cmEv = &ev
			}
		}
		return secretEv != nil && cmEv != nil
	})
	if got := cmEv.Annotations["sec-leak/leak"]; got != password {
		t.Errorf("the ConfigMap's event: annotation sec-leak/leak = %q, want the policy's %q (kube records it)", got, password)
	}
	if st := secretEv.ResponseStatus; st == nil || st.Code < 400 || st.Message != "message not recorded: the request carries credentials" {
		t.Errorf("the Secret's event records status %+v", st)
	}
	if _, ok := secretEv.Annotations["sec-leak/leak"]; ok {
		t.Error("the Secret's event records the policy's annotation")
	}
	if f := secretEv.Annotations["validation.policy.admission.k8s.io/validation_failure"]; !strings.Contains(f, `"policy":"sec-leak"`) || strings.Contains(f, "message") {
		t.Errorf("the Secret's event: validation_failure %q, want the policy's record without its message", f)
	}
	b, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	// Every line about the Secret: no form of its data.
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"resource":"secrets"`) {
			continue
		}
		for _, form := range []string{password, encoded} {
			if strings.Contains(line, form) {
				t.Fatalf("the audit log holds the Secret's data (%s): %s", form, line)
			}
		}
	}
}

// secWatch is one watch secWatchRefusal opened; stop ends it.
type secWatch struct{ stop func() }

// secWatchRefusal opens watches of url with c until one is refused or max
// are open, and returns those it opened and the refusal (code 0: none).
func secWatchRefusal(t *testing.T, c *http.Client, url string, max int) ([]secWatch, httpResult) {
	t.Helper()
	var open []secWatch
	for range max {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("watch %s: %v", url, err)
		}
		if resp.StatusCode == http.StatusOK {
			open = append(open, secWatch{stop: func() { cancel(); resp.Body.Close() }})
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return open, httpResult{code: resp.StatusCode, header: resp.Header, body: b}
	}
	return open, httpResult{}
}

// watchClient is a client for cfg whose requests have no time limit (a
// watch ends when its test stops it).
func watchClient(t *testing.T, cfg *rest.Config) *http.Client {
	c := clientFor(t, cfg)
	c.Timeout = 0
	return c
}

// secWatchFlood: a ServiceAccount's watches stop at --max-watches-per-user
// with a 429, and so do those of a token for a kube-system controller's
// ServiceAccount (a token is never a system identity); many users
// together stop short of the reserve. Then system:masters, a controller's
// certificate and the node's own informers still get watches: a
// definition created after the flood is served, and a policy whose
// parameters are its objects takes effect through an informer that
// watches them.
func secWatchFlood(t *testing.T, n *node, write func(name, text string) string) {
	admin := n.httpClient()
	cs := n.clientset()
	watchers := func() float64 {
		v, _ := value(metricFamilies(t, admin, n), "apiserver_longrunning_requests", map[string]string{"verb": "WATCH"})
		return v
	}
	t.Logf("the node runs %v watches of its own before the flood (cap %d, reserve %d)", watchers(), secWatchCap, secWatchReserve)
	for _, m := range []string{
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"sec-flood"}}`,
		`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"flooder","namespace":"sec-flood"}}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"sec-watch-configmaps"},
		  "rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["list","watch"]}]}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"sec-watch-configmaps"},
		  "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"sec-watch-configmaps"},
		  "subjects":[{"kind":"ServiceAccount","name":"flooder","namespace":"sec-flood"},{"kind":"Group","name":"sec-flooders","apiGroup":"rbac.authorization.k8s.io"}]}`,
	} {
		var obj struct {
			APIVersion, Kind string
			Metadata         struct{ Name, Namespace string }
		}
		if err := json.Unmarshal([]byte(m), &obj); err != nil {
			t.Fatal(err)
		}
		path := map[string]string{
			"Namespace": "/api/v1/namespaces", "ServiceAccount": "/api/v1/namespaces/sec-flood/serviceaccounts",
			"ClusterRole":        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
			"ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		}[obj.Kind]
		if r := do(t, admin, http.MethodPost, n.url()+path, jsonHeader("application/json"), []byte(m)); r.code != http.StatusCreated {
			t.Fatalf("create %s %s: %d %s", obj.Kind, obj.Metadata.Name, r.code, r.body)
		}
	}
	// A kube-system controller's ServiceAccount, as an admin of kube-system
	// can have a token made for (the node's controller runs with a
	// certificate, not this account's token).
	if r := do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces/kube-system/serviceaccounts", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"namespace-controller"}}`)); r.code != http.StatusCreated && r.code != http.StatusConflict {
		t.Fatalf("kube-system/namespace-controller: %d %s", r.code, r.body)
	}
	const configmaps = "/api/v1/configmaps?watch=true"
	var all []secWatch
	defer func() {
		for _, w := range all {
			w.stop()
		}
	}()
	perUser := fmt.Sprintf("too many watches by this user on this server (limit %d per user), please try again later", secWatchesPerUser)
	reserved := fmt.Sprintf("too many watches on this server (limit %d, of which %d are kept for system components), please try again later", secWatchCap, secWatchReserve)

	for _, tc := range []struct{ name, ns, sa string }{
		{"a ServiceAccount", "sec-flood", "flooder"},
		{"a token of a kube-system controller's ServiceAccount", "kube-system", "namespace-controller"},
	} {
		tok := requestToken(t, cs, tc.ns, tc.sa, authenticationv1.TokenRequestSpec{}).Status.Token
		open, refusal := secWatchRefusal(t, watchClient(t, n.tokenConfig(t, tok)), n.url()+configmaps, 2*secWatchesPerUser)
		all = append(all, open...)
		if len(open) != secWatchesPerUser {
			t.Fatalf("%s opened %d watches, want the per-user limit %d (refusal %d %s)", tc.name, len(open), secWatchesPerUser, refusal.code, refusal.body)
		}
		wantStatus(t, refusal, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, perUser)
		if refusal.header.Get("Retry-After") != "1" {
			t.Fatalf("%s's 429 Retry-After %q", tc.name, refusal.header.Get("Retry-After"))
		}
	}

	// Many users take what users may take; the last slots stay.
	var lastRefusal httpResult
	for i := 0; i < 2*secWatchCap/secWatchesPerUser && lastRefusal.code == 0; i++ {
		c := watchClient(t, n.userConfig(t, fmt.Sprintf("sec-flooder-%d", i), "sec-flooders"))
		open, refusal := secWatchRefusal(t, c, n.url()+configmaps, 2*secWatchesPerUser)
		all = append(all, open...)
		if refusal.code == 0 || strings.Contains(string(refusal.body), perUser) {
			continue
		}
		lastRefusal = refusal
	}
	wantStatus(t, lastRefusal, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, reserved)
	t.Logf("the flood holds %d watches", len(all))

	// Who still gets a watch: system:masters, and the node's own
	// controllers (below: their certificates come from its loopback CA).
	// A controller's name on a certificate of the cluster CA, which a
	// kube-apiserver-client approver can give anyone, is no system
	// identity.
	open, refusal := secWatchRefusal(t, watchClient(t, n.restConfig()), n.url()+configmaps, 1)
	all = append(all, open...)
	if len(open) != 1 {
		t.Fatalf("system:masters was refused a watch after the flood: %d %s", refusal.code, refusal.body)
	}
	open, refusal = secWatchRefusal(t, watchClient(t, n.userConfig(t, "system:serviceaccount:kube-system:namespace-controller",
		"system:serviceaccounts", "system:serviceaccounts:kube-system")), n.url()+configmaps, 1)
	all = append(all, open...)
	wantStatus(t, refusal, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, reserved)

	// The node's own informers: a definition created now is served, and a
	// policy over its objects takes effect, which needs the policy
	// plugin's informer of levers, a watch started now.
	n.mustKubectl("apply", "-f", write("levers", secLeversCRD))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/levers.sec.example.com")
	if r := do(t, admin, http.MethodPost, n.url()+"/apis/sec.example.com/v1/levers", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"sec.example.com/v1","kind":"Lever","metadata":{"name":"lever"},"spec":{"forbidden":"banned"}}`)); r.code != http.StatusCreated {
		t.Fatalf("create the lever: %d %s", r.code, r.body)
	}
	if r := do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"sec-params","labels":{"sec-params":"true"}}}`)); r.code != http.StatusCreated {
		t.Fatalf("namespace: %d %s", r.code, r.body)
	}
	n.mustKubectl("apply", "-f", write("lever-policy", secLeverPolicy))
	var banned httpResult
	for i := 0; i < 300; i++ { // until the policy is in force, at most 30 s
		banned = do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces/sec-params/configmaps", jsonHeader("application/json"),
			[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"banned"}}`))
		if banned.code >= 400 {
			break
		}
		do(t, admin, http.MethodDelete, n.url()+"/api/v1/namespaces/sec-params/configmaps/banned", nil, nil)
		time.Sleep(100 * time.Millisecond)
	}
	if st := failureStatus(t, banned); !strings.Contains(st.Message, "the lever forbids banned") {
		t.Fatalf("the lever policy never took effect: %d %s", banned.code, banned.body)
	}
	levers := map[string]string{"group": "sec.example.com", "resource": "levers", "verb": "WATCH"}
	waitFor(t, 30*time.Second, "a watch of levers by the node's informers", func() bool {
		v, _ := value(metricFamilies(t, admin, n), "apiserver_longrunning_requests", levers)
		return v >= 1
	})
	fams := metricFamilies(t, admin, n)
	if v, ok := value(fams, "apiserver_request_total", map[string]string{"resource": "levers", "verb": "WATCH", "code": "429"}); ok {
		t.Fatalf("%v watches of levers were refused", v)
	}
	// And users are still held back: the flood is still on.
	_, refusal = secWatchRefusal(t, watchClient(t, n.userConfig(t, "sec-late", "sec-flooders")), n.url()+configmaps, 1)
	wantStatus(t, refusal, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, reserved)
}

// secInFlightFloods: with the one mutating slot held by a slow write,
// writes with no credential, a bad token, or a token without rights get
// 429 (their 401 and 403 wait for the slot like any request), while
// system:masters is served; the read-only slots, free, still answer 401.
func secInFlightFloods(t *testing.T) {
	n := startNode(t, "--controllers=false", "--max-requests-inflight", "1", "--max-mutating-requests-inflight", "1", "--request-timeout", "30s")
	n.trustplaneOnly(t, "its flags")
	admin := n.httpClient()
	cs := n.clientset()
	bindClusterAdmin(t, n, "slow-writer")
	slowCfg := n.userConfig(t, "slow-writer")
	if r := do(t, admin, http.MethodPost, n.url()+"/api/v1/namespaces/default/serviceaccounts", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"nobody"}}`)); r.code != http.StatusCreated {
		t.Fatalf("ServiceAccount: %d %s", r.code, r.body)
	}
	nobody := clientFor(t, n.tokenConfig(t, requestToken(t, cs, "default", "nobody", authenticationv1.TokenRequestSpec{}).Status.Token))
	badToken := clientFor(t, n.tokenConfig(t, "not-a-token"))
	anonymous := n.anonClient()
	const configmaps = "/api/v1/namespaces/default/configmaps"
	post := func(c *http.Client) httpResult {
		return do(t, c, http.MethodPost, n.url()+configmaps, jsonHeader("application/json"),
			[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"f-"}}`))
	}
	floods := []struct {
		name string
		c    *http.Client
		free int // the answer while the slot is free
	}{
		{"no credential", anonymous, http.StatusUnauthorized},
		{"a bad token", badToken, http.StatusUnauthorized},
		{"a token without rights", nobody, http.StatusForbidden},
	}
	for _, f := range floods {
		if r := post(f.c); r.code != f.free {
			t.Fatalf("%s, slot free: %d %s, want %d", f.name, r.code, r.body, f.free)
		}
	}
	// kube's filter records each refusal as a 429 of the request.
	dropped := func() float64 {
		v, _ := value(metricFamilies(t, admin, n), "apiserver_request_total",
			map[string]string{"verb": "POST", "resource": "configmaps", "code": "429"})
		return v
	}
	dropped0 := dropped()

	tcfg, err := rest.TLSConfigFor(slowCfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// One slow write holds the mutating slot until stop (or its 30 s
		// body deadline, past this case's bounded waits).
		trickle(n.listen, tcfg, configmaps, 100*time.Millisecond, 40*time.Second, stop)
	}()
	stopped := false
	release := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer release()
	waitFor(t, 20*time.Second, "the slow write to hold the mutating slot", func() bool {
		return post(anonymous).code == http.StatusTooManyRequests
	})
	for _, f := range floods {
		t.Run(f.name+" gets 429 while the slot is held", func(t *testing.T) {
			for range 5 {
				r := post(f.c)
				if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" ||
					strings.TrimSpace(string(r.body)) != "Too many requests, please try again later." {
					t.Fatalf("%d Retry-After %q: %s", r.code, r.header.Get("Retry-After"), r.body)
				}
			}
		})
	}
	if r := post(admin); r.code != http.StatusCreated {
		t.Fatalf("system:masters while the slot is held: %d %s", r.code, r.body)
	}
	if r := do(t, anonymous, http.MethodGet, n.url()+configmaps, nil, nil); r.code != http.StatusUnauthorized {
		t.Fatalf("a read without credential, read-only slot free: %d %s", r.code, r.body)
	}
	if d := dropped() - dropped0; d < float64(1+5*len(floods)) {
		t.Fatalf("apiserver_request_total{verb=POST,resource=configmaps,code=429} grew by %v, want at least %d", d, 1+5*len(floods))
	}
	release()
	waitFor(t, 20*time.Second, "the slot to be free again", func() bool { return post(anonymous).code == http.StatusUnauthorized })
}
