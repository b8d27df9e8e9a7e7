package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kindPolicy is one real policy on one served kind: the rule an operator of
// an identity plane would write, an object that breaks it and one that
// keeps it.
type kindPolicy struct {
	name string
	// gvr is the resource the policy matches; sub its subresource.
	gvr schema.GroupVersionResource
	sub string
	// path is where the objects are posted, under the node's URL.
	path       string
	expression string
	message    string
	// bad breaks the rule, good keeps it; both are otherwise valid, since
	// policies run after the strategy's validation. Each is a JSON object.
	bad, good map[string]any
	// forbidden is the start of the refusal, before the policy's words.
	forbidden string
}

func meta(name string, extra map[string]any) map[string]any {
	m := map[string]any{"name": name}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// TestE2EAdmissionPolicyEveryKind writes one real ValidatingAdmissionPolicy
// for every kind this server stores, and for TokenRequest, and checks each
// refuses the object that breaks it (dry run, with kube's Status) and
// admits the one that keeps it. As in kube-apiserver, the reviews are out
// of admission and the policy kinds out of reach of policies: a policy
// that refuses every TokenReview, or every policy, refuses none.
func TestE2EAdmissionPolicyEveryKind(t *testing.T) {
	n := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true", "--feature-gates", "ClusterTrustBundle=true")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := n.clientset()
	const ns = "e2e-kinds"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "identity"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	off := false
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}, AutomountServiceAccountToken: &off}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pods below are admitted by kube's ServiceAccount plugin, which
	// waits for the namespace's default ServiceAccount.
	waitFor(t, 30*time.Second, "the default ServiceAccount of "+ns, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})

	core := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Version: "v1", Resource: resource}
	}
	gv := func(group, version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
	nsPath := "/api/v1/namespaces/" + ns + "/"
	pod := func(hostNetwork bool) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta("p", nil), "spec": map[string]any{
			"hostNetwork": hostNetwork, "automountServiceAccountToken": false,
			"containers": []any{map[string]any{"name": "c", "image": "registry.example/app:1"}}}}
	}
	podTemplate := func(image string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta("pt", nil), "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "c", "image": image}}}}}
	}
	event := func(reason string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Event", "metadata": meta("ev", map[string]any{"namespace": ns}),
			"involvedObject": map[string]any{"kind": "ServiceAccount", "name": "app", "namespace": ns}, "reason": reason, "message": "m", "type": "Normal",
			"source": map[string]any{"component": "e2e"}}
	}
	eventsV1 := func(note string) map[string]any {
		return map[string]any{"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta("ev", nil),
			"eventTime": "2026-01-01T00:00:00.000000Z", "type": "Normal", "reason": "Rotated", "action": "Rotate", "note": note,
			"reportingController": "example.com/rotator", "reportingInstance": "rotator-1",
			"regarding": map[string]any{"kind": "ServiceAccount", "name": "app", "namespace": ns}}
	}
	csr := func(expiration int) map[string]any {
		return map[string]any{"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": meta("c", nil), "spec": map[string]any{
			"request": csrPEM(t, "svc"), "signerName": "example.com/issuer", "expirationSeconds": expiration, "usages": []any{"digital signature", "client auth"}}}
	}
	rules := func(verb string) []any {
		return []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{verb}}}
	}
	binding := func(kind, role string, subjects ...any) map[string]any {
		return map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta("b", nil),
			"roleRef": map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects}
	}
	user := func(name string) map[string]any {
		return map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}
	}
	caPEM := string(n.caPEM(t))
	bundle := func(name, signer string) map[string]any {
		spec := map[string]any{"trustBundle": caPEM}
		if signer != "" {
			spec["signerName"] = signer
		}
		return map[string]any{"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle", "metadata": meta(name, nil), "spec": spec}
	}
	vap := func(failurePolicy string) map[string]any {
		return map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": meta("p", nil), "spec": map[string]any{
			"failurePolicy": failurePolicy,
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"},
				"operations": []any{"CREATE"}, "resources": []any{"configmaps"}}}},
			"validations": []any{map[string]any{"expression": "true"}}}}
	}
	vapb := func(action string) map[string]any {
		return map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": meta("b", nil), "spec": map[string]any{
			"policyName": "p", "validationActions": []any{action}}}
	}

	policies := []kindPolicy{
		{name: "configmaps", gvr: core("configmaps"), path: nsPath + "configmaps",
			expression: "!has(object.data) || !('password' in object.data)", message: "ConfigMaps must not hold passwords",
			bad:       map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cm", nil), "data": map[string]any{"password": "hunter2"}},
			good:      map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cm", nil), "data": map[string]any{"user": "svc"}},
			forbidden: `configmaps "cm" is forbidden`},
		{name: "secrets", gvr: core("secrets"), path: nsPath + "secrets",
			expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels", message: "Secrets must name their owner",
			bad:       map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta("s", nil), "stringData": map[string]any{"k": "v"}},
			good:      map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta("s", map[string]any{"labels": map[string]any{"owner": "identity"}}), "stringData": map[string]any{"k": "v"}},
			forbidden: `secrets "s" is forbidden`},
		{name: "serviceaccounts", gvr: core("serviceaccounts"), path: nsPath + "serviceaccounts",
			expression: "has(object.automountServiceAccountToken) && object.automountServiceAccountToken == false", message: "ServiceAccounts must not automount tokens",
			bad:       map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("sa", nil)},
			good:      map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("sa", nil), "automountServiceAccountToken": false},
			forbidden: `serviceaccounts "sa" is forbidden`},
		{name: "tokenrequests", gvr: core("serviceaccounts"), sub: "token", path: nsPath + "serviceaccounts/app/token",
			expression: "object.spec.expirationSeconds <= 3600", message: "tokens live at most an hour",
			bad:       map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 7200}},
			good:      map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}},
			forbidden: `serviceaccounts "app" is forbidden`},
		{name: "namespaces", gvr: core("namespaces"), path: "/api/v1/namespaces",
			expression: "has(object.metadata.labels) && 'team' in object.metadata.labels", message: "namespaces belong to a team",
			bad:       map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": meta("e2e-kinds-ns", nil)},
			good:      map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": meta("e2e-kinds-ns", map[string]any{"labels": map[string]any{"team": "identity"}})},
			forbidden: `namespaces "e2e-kinds-ns" is forbidden`},
		{name: "events", gvr: core("events"), path: nsPath + "events",
			expression: "object.reason != 'Debug'", message: "debug events are not recorded",
			bad: event("Debug"), good: event("Rotated"), forbidden: `events "ev" is forbidden`},
		{name: "events-v1", gvr: gv("events.k8s.io", "v1", "events"), path: "/apis/events.k8s.io/v1/namespaces/" + ns + "/events",
			expression: "!has(object.note) || size(object.note) <= 64", message: "event notes are short",
			bad: eventsV1(strings.Repeat("x", 65)), good: eventsV1("rotated"), forbidden: `events.events.k8s.io "ev" is forbidden`},
		{name: "pods", gvr: core("pods"), path: nsPath + "pods",
			expression: "!has(object.spec.hostNetwork) || !object.spec.hostNetwork", message: "pods stay off the host network",
			bad: pod(true), good: pod(false), forbidden: `pods "p" is forbidden`},
		{name: "podtemplates", gvr: core("podtemplates"), path: nsPath + "podtemplates",
			expression: "object.template.spec.containers.all(c, c.image.startsWith('registry.example/'))",
			message:    "templates pull from registry.example only",
			bad:        podTemplate("docker.io/app:1"), good: podTemplate("registry.example/app:1"), forbidden: `podtemplates "pt" is forbidden`},
		{name: "certificatesigningrequests", gvr: gv("certificates.k8s.io", "v1", "certificatesigningrequests"), path: "/apis/certificates.k8s.io/v1/certificatesigningrequests",
			expression: "!object.spec.signerName.startsWith('example.com/') || (has(object.spec.expirationSeconds) && object.spec.expirationSeconds <= 86400)",
			message:    "CSRs for example.com signers ask for at most 24h",
			bad:        csr(2 * 86400), good: csr(86400), forbidden: `certificatesigningrequests.certificates.k8s.io "c" is forbidden`},
		{name: "clustertrustbundles", gvr: gv("certificates.k8s.io", "v1beta1", "clustertrustbundles"), path: "/apis/certificates.k8s.io/v1beta1/clustertrustbundles",
			expression: "!has(object.spec.signerName) || object.spec.signerName != 'example.com/issuer' || request.userInfo.groups.exists(g, g == 'platform')",
			message:    "only the platform team publishes bundles for example.com/issuer",
			bad:        bundle("example.com:issuer:b", "example.com/issuer"), good: bundle("b", ""),
			forbidden: `clustertrustbundles.certificates.k8s.io "example.com:issuer:b" is forbidden`},
		{name: "leases", gvr: gv("coordination.k8s.io", "v1", "leases"), path: "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases",
			expression: "!has(object.spec.leaseDurationSeconds) || object.spec.leaseDurationSeconds <= 60", message: "leases last at most a minute",
			bad:       map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("l", nil), "spec": map[string]any{"holderIdentity": "a", "leaseDurationSeconds": 3600}},
			good:      map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("l", nil), "spec": map[string]any{"holderIdentity": "a", "leaseDurationSeconds": 15}},
			forbidden: `leases.coordination.k8s.io "l" is forbidden`},
		{name: "roles", gvr: gv("rbac.authorization.k8s.io", "v1", "roles"), path: "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns + "/roles",
			expression: "!has(object.rules) || object.rules.all(r, !('*' in r.verbs))", message: "Roles grant no wildcard verbs",
			bad:       map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("r", nil), "rules": rules("*")},
			good:      map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("r", nil), "rules": rules("get")},
			forbidden: `roles.rbac.authorization.k8s.io "r" is forbidden`},
		{name: "clusterroles", gvr: gv("rbac.authorization.k8s.io", "v1", "clusterroles"), path: "/apis/rbac.authorization.k8s.io/v1/clusterroles",
			expression: "!has(object.rules) || object.rules.all(r, !('*' in r.verbs))", message: "ClusterRoles grant no wildcard verbs",
			bad:       map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("e2e-kinds-cr", nil), "rules": rules("*")},
			good:      map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta("e2e-kinds-cr", nil), "rules": rules("get")},
			forbidden: `clusterroles.rbac.authorization.k8s.io "e2e-kinds-cr" is forbidden`},
		{name: "rolebindings", gvr: gv("rbac.authorization.k8s.io", "v1", "rolebindings"), path: "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns + "/rolebindings",
			expression: "object.roleRef.name != 'cluster-admin'", message: "nobody is bound to cluster-admin in a namespace",
			bad: binding("RoleBinding", "cluster-admin", user("alice")), good: binding("RoleBinding", "view", user("alice")),
			forbidden: `rolebindings.rbac.authorization.k8s.io "b" is forbidden`},
		{name: "clusterrolebindings", gvr: gv("rbac.authorization.k8s.io", "v1", "clusterrolebindings"), path: "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
			expression: "!has(object.subjects) || object.subjects.all(s, s.name != 'system:anonymous')", message: "anonymous is bound to nothing",
			bad: binding("ClusterRoleBinding", "view", user("system:anonymous")), good: binding("ClusterRoleBinding", "view", user("alice")),
			forbidden: `clusterrolebindings.rbac.authorization.k8s.io "b" is forbidden`},
		// Out of reach of policies in kube-apiserver (its policy plugin
		// exempts its own configuration, so that a bad policy can always
		// be fixed) and out of admission altogether (the reviews): these
		// policies refuse everything, and nothing is refused.
		{name: "validatingadmissionpolicies", gvr: gv("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"), path: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
			expression: "false", message: "no policies", good: vap("Fail")},
		{name: "validatingadmissionpolicybindings", gvr: gv("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"), path: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
			expression: "false", message: "no bindings", good: vapb("Deny")},
		{name: "tokenreviews", gvr: gv("authentication.k8s.io", "v1", "tokenreviews"), path: "/apis/authentication.k8s.io/v1/tokenreviews",
			expression: "false", message: "no TokenReviews",
			good: map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": "not-a-token"}}},
	}

	// Every policy and binding first, then the writes: the node's
	// plugin picks them up from its informers. They are written last row
	// first, so that once the rows before it refuse, the TokenReview
	// policy has certainly reached the plugin (each informer delivers in
	// order) and its failure to refuse means something.
	for i := range policies {
		p := policies[len(policies)-1-i]
		resource := p.gvr.Resource
		if p.sub != "" {
			resource += "/" + p.sub
		}
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + p.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{p.gvr.Group}, APIVersions: []string{p.gvr.Version}, Resources: []string{resource}},
					}}}},
				Validations: []admissionregistrationv1.Validation{{Expression: p.expression, Message: p.message}},
			},
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			t.Fatalf("policy on %s: %v", p.name, err)
		}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + p.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "e2e-" + p.name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding on %s: %v", p.name, err)
		}
	}

	c := n.httpClient()
	post := func(path string, obj map[string]any) httpResult {
		body, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		return do(t, c, http.MethodPost, n.url()+path+"?dryRun=All", jsonHeader("application/json"), body)
	}
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			if p.bad != nil {
				var r httpResult
				waitFor(t, 30*time.Second, "policy e2e-"+p.name+" to refuse", func() bool {
					r = post(p.path, p.bad)
					return r.code != http.StatusCreated
				})
				wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
					fmt.Sprintf("%s: ValidatingAdmissionPolicy 'e2e-%s' with binding 'e2e-%s' denied request: %s", p.forbidden, p.name, p.name, p.message))
			}
			if r := post(p.path, p.good); r.code != http.StatusCreated {
				t.Fatalf("an object that keeps the rule of e2e-%s: %d %s", p.name, r.code, r.body)
			}
		})
	}
}
