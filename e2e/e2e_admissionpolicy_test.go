package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// saPolicy is a policy on ServiceAccount creates with one validation.
func saPolicy(name string, v admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"serviceaccounts"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{v},
		},
	}
}

// TestE2EAdmissionPolicyResources checks that the two admission policy
// kinds are served as kube-apiserver serves them (discovery, kubectl's
// table, validation of CEL at create, kubectl apply over an existing
// policy) and that kube's status controller writes type-checking warnings.
func TestE2EAdmissionPolicyResources(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "validatingadmissionpolicy/e2e-typecheck", "validatingadmissionpolicy/e2e-bad")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	policies := n.clientset().AdmissionregistrationV1().ValidatingAdmissionPolicies()

	out := n.mustKubectl("api-resources", "--api-group=admissionregistration.k8s.io", "--no-headers")
	for _, want := range []string{"validatingadmissionpolicies ", "validatingadmissionpolicybindings "} {
		if !strings.Contains(out, want) {
			t.Errorf("api-resources lacks %s:\n%s", want, out)
		}
	}
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/openapi/v3/apis/admissionregistration.k8s.io/v1", nil, nil)
	if r.code != http.StatusOK || !strings.Contains(string(r.body), "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding") {
		t.Errorf("OpenAPI v3 of admissionregistration.k8s.io/v1: %d", r.code)
	}

	_, err := policies.Create(ctx, saPolicy("e2e-bad", admissionregistrationv1.Validation{Expression: "object.foo =="}), metav1.CreateOptions{})
	wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`ValidatingAdmissionPolicy.admissionregistration.k8s.io "e2e-bad" is invalid: spec.validations[0].expression: Invalid value: "object.foo ==": compilation failed: ERROR: <input>:1:14: Syntax error: mismatched input '<EOF>'*`)

	// Compiles, but a ServiceAccount has no spec: the status controller
	// says so, with the expression's field path.
	if _, err := policies.Create(ctx, saPolicy("e2e-typecheck", admissionregistrationv1.Validation{Expression: "object.spec.replicas > 1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var warnings []admissionregistrationv1.ExpressionWarning
	waitFor(t, 30*time.Second, "status.typeChecking of e2e-typecheck", func() bool {
		p, err := policies.Get(ctx, "e2e-typecheck", metav1.GetOptions{})
		if err != nil || p.Status.TypeChecking == nil {
			return false
		}
		warnings = p.Status.TypeChecking.ExpressionWarnings
		return true
	})
	if len(warnings) != 1 || warnings[0].FieldRef != "spec.validations[0].expression" || !strings.Contains(warnings[0].Warning, "undefined field 'spec'") {
		t.Fatalf("type checking warnings %+v, want one on spec.validations[0].expression about the undefined field spec", warnings)
	}

	out = n.mustKubectl("get", "validatingadmissionpolicies")
	if !strings.Contains(out, "VALIDATIONS") || !strings.Contains(out, "PARAMKIND") || !strings.Contains(out, "e2e-typecheck") {
		t.Errorf("kubectl get validatingadmissionpolicies:\n%s", out)
	}
	// kubectl apply over an existing policy patches it, with no
	// resourceVersion, which kube's strategy requires of a PUT only.
	n.mustKubectl("label", "validatingadmissionpolicy", "e2e-typecheck", "e2e=yes")
}

// bind binds policy in the namespaces labelled with ns's name, with
// actions.
func bind(name, policy, ns string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy,
			ValidationActions: actions,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
}

// TestE2EAdmissionPolicyEnforced checks that kube's ValidatingAdmissionPolicy
// plugin guards writes: a Deny binding refuses a create (and its dry run)
// with kube's Status, messageExpression words the refusal, an expression
// that fails is refused under failurePolicy Fail, a delete is checked
// against the stored object, params come from a bound ConfigMap, and a
// Warn binding
// answers with a Warning header and lets the write through.
func TestE2EAdmissionPolicyEnforced(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "validatingadmissionpolicy/e2e-no-automount", "validatingadmissionpolicybinding/e2e-no-automount-prod",
		"validatingadmissionpolicy/e2e-no-tmp", "validatingadmissionpolicybinding/e2e-no-tmp-staging",
		"validatingadmissionpolicy/e2e-keep", "validatingadmissionpolicybinding/e2e-keep-prod",
		"validatingadmissionpolicy/e2e-prefix", "validatingadmissionpolicybinding/e2e-prefix-prod",
		"validatingadmissionpolicy/e2e-request", "validatingadmissionpolicybinding/e2e-request-staging",
		"namespace/e2e-prod", "namespace/e2e-staging")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := n.clientset()
	for _, ns := range []string{"e2e-prod", "e2e-staging"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	policies, bindings := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies(), cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	noAutomount := saPolicy("e2e-no-automount", admissionregistrationv1.Validation{
		Expression: "object.automountServiceAccountToken == false", Message: "ServiceAccounts in prod must not automount tokens"})
	noTmp := saPolicy("e2e-no-tmp", admissionregistrationv1.Validation{
		Expression: "!object.metadata.name.startsWith('tmp-')", MessageExpression: "'name ' + object.metadata.name + ' looks temporary'"})
	for _, p := range []*admissionregistrationv1.ValidatingAdmissionPolicy{noAutomount, noTmp} {
		if _, err := policies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		bind("e2e-no-automount-prod", "e2e-no-automount", "e2e-prod", admissionregistrationv1.Deny),
		bind("e2e-no-tmp-staging", "e2e-no-tmp", "e2e-staging", admissionregistrationv1.Warn),
	} {
		if _, err := bindings.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	automount := func(name string, on bool) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}, AutomountServiceAccountToken: &on}
	}
	sas := cs.CoreV1().ServiceAccounts("e2e-prod")
	// Policies reach the plugin through its informers: wait, with a
	// deadline, until a dry run is refused.
	const denied = `serviceaccounts "on" is forbidden: ValidatingAdmissionPolicy 'e2e-no-automount' with binding 'e2e-no-automount-prod' denied request: ServiceAccounts in prod must not automount tokens`
	waitFor(t, 30*time.Second, "the policy to be enforced", func() bool {
		_, err := sas.Create(ctx, automount("on", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})
	_, err := sas.Create(ctx, automount("on", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, denied)
	_, err = sas.Create(ctx, automount("on", true), metav1.CreateOptions{})
	wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, denied)
	if _, err := sas.Create(ctx, automount("off", false), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a ServiceAccount that does not automount: %v", err)
	}
	// Unset, the field is missing: the expression fails, and
	// failurePolicy Fail (the default) refuses the write, also as 422.
	_, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "unset"}}, metav1.CreateOptions{})
	wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`serviceaccounts "unset" is forbidden: ValidatingAdmissionPolicy 'e2e-no-automount' with binding 'e2e-no-automount-prod' denied request: expression 'object.automountServiceAccountToken == false' resulted in error: no such key: automountServiceAccountToken`)
	// Outside prod the policy is not bound.
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, automount("on", true), metav1.CreateOptions{}); err != nil {
		t.Fatalf("outside the bound namespace: %v", err)
	}

	// DELETE: the policy sees the stored object as oldObject.
	keep := saPolicy("e2e-keep", admissionregistrationv1.Validation{
		Expression: "!has(oldObject.metadata.labels) || !('keep' in oldObject.metadata.labels)", Message: "this ConfigMap is kept"})
	keep.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
	keep.Spec.MatchConstraints.ResourceRules[0].Resources = []string{"configmaps"}
	if _, err := policies.Create(ctx, keep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, bind("e2e-keep-prod", "e2e-keep", "e2e-prod", admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps("e2e-prod")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Labels: map[string]string{"keep": ""}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the delete policy to be enforced", func() bool {
		return cms.Delete(ctx, "kept", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}) != nil
	})
	wantAPIError(t, cms.Delete(ctx, "kept", metav1.DeleteOptions{}), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`configmaps "kept" is forbidden: ValidatingAdmissionPolicy 'e2e-keep' with binding 'e2e-keep-prod' denied request: this ConfigMap is kept`)
	if _, err := cms.Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("the refused delete deleted: %v", err)
	}

	// Params: the binding's ConfigMap, read through the plugin's informers.
	if _, err := cs.CoreV1().ConfigMaps("e2e-staging").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-prefix"}, Data: map[string]string{"prefix": "ok-"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prefix := saPolicy("e2e-prefix", admissionregistrationv1.Validation{
		Expression: "object.metadata.name.startsWith(params.data.prefix)", MessageExpression: "'name must start with ' + params.data.prefix"})
	prefix.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	if _, err := policies.Create(ctx, prefix, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deny := admissionregistrationv1.DenyAction
	withParams := bind("e2e-prefix-prod", "e2e-prefix", "e2e-prod", admissionregistrationv1.Deny)
	withParams.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "e2e-prefix", Namespace: "e2e-staging", ParameterNotFoundAction: &deny}
	if _, err := bindings.Create(ctx, withParams, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the policy with params to be enforced", func() bool {
		_, err := sas.Create(ctx, automount("p-0", false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})
	_, err = sas.Create(ctx, automount("p-0", false), metav1.CreateOptions{})
	wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		`serviceaccounts "p-0" is forbidden: ValidatingAdmissionPolicy 'e2e-prefix' with binding 'e2e-prefix-prod' denied request: name must start with ok-`)
	if _, err := sas.Create(ctx, automount("ok-0", false), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a name with the prefix: %v", err)
	}

	// Warn: the write succeeds with the message of messageExpression.
	const warning = `299 - "Validation failed for ValidatingAdmissionPolicy 'e2e-no-tmp' with binding 'e2e-no-tmp-staging': name tmp-0 looks temporary"`
	var r httpResult
	for i := 0; ; i++ {
		body := []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"tmp-%d"}}`, i))
		r = do(t, n.httpClient(), http.MethodPost, n.url()+"/api/v1/namespaces/e2e-staging/serviceaccounts?dryRun=All", jsonHeader("application/json"), body)
		if r.code != http.StatusCreated {
			t.Fatalf("a warned create: %d %s", r.code, r.body)
		}
		if len(r.header.Values("Warning")) > 0 || i == 300 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r = do(t, n.httpClient(), http.MethodPost, n.url()+"/api/v1/namespaces/e2e-staging/serviceaccounts", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"tmp-0"}}`))
	if r.code != http.StatusCreated {
		t.Fatalf("a warned create: %d %s", r.code, r.body)
	}
	if got := r.header.Values("Warning"); len(got) != 1 || got[0] != warning {
		t.Fatalf("Warning headers %q, want [%s]", got, warning)
	}

	// A policy sees the request's dry run, and the object as the strategy
	// prepared it (kube runs validating admission after the strategy): a
	// ServiceAccount has its uid by then.
	seen := saPolicy("e2e-request", admissionregistrationv1.Validation{
		Expression:        "!request.dryRun",
		MessageExpression: "'dry run of ' + object.metadata.name + (object.metadata.uid != '' ? ' with a uid' : '')"})
	if _, err := policies.Create(ctx, seen, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, bind("e2e-request-staging", "e2e-request", "e2e-staging", admissionregistrationv1.Warn), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const dryWarning = `299 - "Validation failed for ValidatingAdmissionPolicy 'e2e-request' with binding 'e2e-request-staging': dry run of dry-0 with a uid"`
	waitFor(t, 30*time.Second, "the dry-run policy's warning", func() bool {
		r = do(t, n.httpClient(), http.MethodPost, n.url()+"/api/v1/namespaces/e2e-staging/serviceaccounts?dryRun=All", jsonHeader("application/json"),
			[]byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"dry-0"}}`))
		return slices.Contains(r.header.Values("Warning"), dryWarning)
	})
	r = do(t, n.httpClient(), http.MethodPost, n.url()+"/api/v1/namespaces/e2e-staging/serviceaccounts", jsonHeader("application/json"),
		[]byte(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"dry-0"}}`))
	if r.code != http.StatusCreated || len(r.header.Values("Warning")) != 0 {
		t.Fatalf("a real create: %d, warnings %q, want 201 and none", r.code, r.header.Values("Warning"))
	}
}

// TestE2EAdmissionPolicyAcrossNodes checks that a policy written through
// one node guards a write sent to another: every node's plugin has its own
// informers, and a follower admits the write it runs (the default,
// --execute-writes=local).
func TestE2EAdmissionPolicyAcrossNodes(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := nodes[0].clientset()
	createNamespace(t, admin, "e2e-prod")
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, saPolicy("e2e-no-automount", admissionregistrationv1.Validation{
		Expression: "object.automountServiceAccountToken == false", Message: "ServiceAccounts in prod must not automount tokens"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx,
		bind("e2e-no-automount-prod", "e2e-no-automount", "e2e-prod", admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	on := true
	for _, n := range nodes {
		sas := n.clientset().CoreV1().ServiceAccounts("e2e-prod")
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "on"}, AutomountServiceAccountToken: &on}
		var err error
		waitFor(t, 30*time.Second, "the policy to guard writes through "+n.name, func() bool {
			_, err = sas.Create(ctx, sa, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil
		})
		wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`serviceaccounts "on" is forbidden: ValidatingAdmissionPolicy 'e2e-no-automount' with binding 'e2e-no-automount-prod' denied request: ServiceAccounts in prod must not automount tokens`)
	}
}

// TestE2EAdmissionPolicyLeaderKilled changes a policy over and over on a
// three-node cluster while the leader is killed, and writes that break it
// keep coming to every node. No breaking write is ever admitted (the new
// leader enforces the policy from the moment it leads: every node keeps
// its own compiled copy), no acknowledged policy change is lost, and the
// survivors and the restarted node all enforce the last one.
func TestE2EAdmissionPolicyLeaderKilled(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := nodes[0].clientset()
	createNamespace(t, admin, "e2e-prod")
	rule := func(version int) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{Expression: "object.automountServiceAccountToken == false",
			Message: fmt.Sprintf("ServiceAccounts in prod must not automount tokens (rule version %d)", version)}
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, saPolicy("e2e-no-automount", rule(0)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx,
		bind("e2e-no-automount-prod", "e2e-no-automount", "e2e-prod", admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	on := true
	breaking := func(name string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}, AutomountServiceAccountToken: &on}
	}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, "the policy to guard writes through "+n.name, func() bool {
			_, err := n.clientset().CoreV1().ServiceAccounts("e2e-prod").Create(ctx, breaking("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil
		})
	}

	// Breaking writes, round-robin over the nodes, until told to stop.
	stop := make(chan struct{})
	var admitted []string
	breakerDone := make(chan struct{})
	go func() {
		defer close(breakerDone)
		for i := 0; i < 2000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			n := nodes[i%len(nodes)]
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			name := fmt.Sprintf("breaking-%d", i)
			if _, err := n.clientset().CoreV1().ServiceAccounts("e2e-prod").Create(wctx, breaking(name), metav1.CreateOptions{}); err == nil {
				admitted = append(admitted, name)
			}
			wcancel()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Policy changes, through whichever node answers; the leader is killed
	// after the fifth.
	leader := leaderOf(t, nodes)
	live := nodes
	acked := 0
	for version := 1; version <= 15; version++ {
		if version == 6 {
			leader.kill()
			live = followersOf(nodes, leader)
		}
		deadline := time.Now().Add(30 * time.Second)
		for attempt := 0; ; attempt++ {
			if time.Now().After(deadline) {
				t.Fatalf("policy change %d was never acknowledged", version)
			}
			policies := live[attempt%len(live)].clientset().AdmissionregistrationV1().ValidatingAdmissionPolicies()
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			p, err := policies.Get(wctx, "e2e-no-automount", metav1.GetOptions{})
			if err == nil {
				p.Spec.Validations = []admissionregistrationv1.Validation{rule(version)}
				_, err = policies.Update(wctx, p, metav1.UpdateOptions{})
			}
			wcancel()
			if err == nil {
				acked = version
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	close(stop)
	<-breakerDone
	if len(admitted) > 0 {
		t.Errorf("writes that break the policy were admitted while it changed and the leader died: %v", admitted)
	}

	want := fmt.Sprintf("(rule version %d)", acked)
	check := func(n *node) {
		var err error
		waitFor(t, 30*time.Second, "rule version "+fmt.Sprint(acked)+" through "+n.name, func() bool {
			_, err = n.clientset().CoreV1().ServiceAccounts("e2e-prod").Create(ctx, breaking("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), want)
		})
		waitFor(t, 30*time.Second, n.name+"'s own copy of rule version "+fmt.Sprint(acked), func() bool {
			p, err := n.clientset().AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "e2e-no-automount", metav1.GetOptions{ResourceVersion: "0"})
			return err == nil && strings.Contains(p.Spec.Validations[0].Message, want)
		})
	}
	for _, n := range live {
		check(n)
	}
	leader.start()
	leader.waitReady(90 * time.Second)
	check(leader)
}
