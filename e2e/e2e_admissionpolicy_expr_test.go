package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestE2EAdmissionPolicyExpressions: the parts of a policy kube's plugin
// evaluates beyond a plain validation, on a real node: matchConditions,
// variables, the binding's objectSelector, params chosen by a selector,
// the CEL authorizer, and the runtime cost budgets: per expression and a
// policy's total.
func TestE2EAdmissionPolicyExpressions(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns = "e2e-vap-expr"
	createNamespace(t, admin, ns)
	policies := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	sa := func(name string, labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	// enforced retries a create until the policy refuses it (informers
	// bring a new policy in within a bounded wait), and returns the error.
	enforcedSA := func(cs kubernetes.Interface, obj *corev1.ServiceAccount) error {
		t.Helper()
		for i := 0; i < 300; i++ {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("a create of %s was never refused", obj.Name)
		return nil
	}
	enforced := func(cs kubernetes.Interface, name string, labels map[string]string) error {
		t.Helper()
		return enforcedSA(cs, sa(name, labels))
	}

	// matchConditions, variables and the binding's objectSelector.
	p := saPolicy("e2e-team", admissionregistrationv1.Validation{
		Expression:        "variables.team == 'platform'",
		MessageExpression: "'team ' + variables.team + ' may not'",
	})
	p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "labelled", Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"}}
	p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "team", Expression: "string(object.metadata.labels['team'])"}}
	if _, err := policies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := bind("e2e-team-b", "e2e-team", ns, admissionregistrationv1.Deny)
	b.Spec.MatchResources.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	if _, err := bindings.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := enforced(admin, "dev-1", map[string]string{"team": "dev"})
	wantAPIError(t, err, 422, metav1.StatusReasonInvalid,
		`serviceaccounts "dev-1" is forbidden: ValidatingAdmissionPolicy 'e2e-team' with binding 'e2e-team-b' denied request: team dev may not`)
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"unlabelled", nil}, // matchConditions false: not evaluated
		{"dev-skipped", map[string]string{"team": "dev", "skip": "y"}}, // objectSelector excludes it
		{"platform-1", map[string]string{"team": "platform"}},
	} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa(c.name, c.labels), metav1.CreateOptions{}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}

	// Params chosen by a label selector.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "limits", Labels: map[string]string{"vap": "prefix"}},
		Data:       map[string]string{"prefix": "svc-"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pp := saPolicy("e2e-prefix-sel", admissionregistrationv1.Validation{
		Expression:        "!object.metadata.name.startsWith('x-') || object.metadata.name.startsWith(params.data.prefix)",
		MessageExpression: "'x- names must start with ' + params.data.prefix",
	})
	pp.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	if _, err := policies.Create(ctx, pp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deny := admissionregistrationv1.DenyAction
	pb := bind("e2e-prefix-sel-b", "e2e-prefix-sel", ns, admissionregistrationv1.Deny)
	pb.Spec.ParamRef = &admissionregistrationv1.ParamRef{Namespace: ns, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"vap": "prefix"}}, ParameterNotFoundAction: &deny}
	if _, err := bindings.Create(ctx, pb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Until the params informer has the ConfigMap, a server may refuse for
	// want of params (kube-apiserver does): wait for the policy's own refusal.
	for i := 0; i < 100; i++ {
		if err = enforced(admin, "x-1", nil); err != nil && strings.Contains(err.Error(), "no params found") {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		break
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "x- names must start with svc-") {
		t.Fatalf("params by selector: %v", err)
	}

	// The CEL authorizer: only a requester who may list secrets here may
	// create a ServiceAccount labelled privileged.
	ap := saPolicy("e2e-authz", admissionregistrationv1.Validation{
		Expression: "!has(object.metadata.labels) || !('privileged' in object.metadata.labels) || " +
			"authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()",
		Message: "privileged accounts need list secrets",
	})
	if _, err := policies.Create(ctx, ap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, bind("e2e-authz-b", "e2e-authz", ns, admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "sa-maker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sa-maker"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "sa-maker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "maker"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	maker := n.userClientset(t, "maker")
	err = enforced(maker, "priv-1", map[string]string{"privileged": "y"})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "privileged accounts need list secrets") {
		t.Fatalf("the authorizer check for maker: %v", err)
	}
	if _, err := maker.CoreV1().ServiceAccounts(ns).Create(ctx, sa("plain-1", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("maker's plain create: %v", err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa("priv-admin", map[string]string{"privileged": "y"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("an admin's privileged create: %v", err)
	}

	// The runtime budget: an evaluation that would cost more than kube's
	// per-expression limit is cut off with an error, and the default
	// failurePolicy (Fail) refuses the write. Its cost grows with the
	// object (seven comprehensions over its secrets: ten make 10^7 steps),
	// so no worst case is known at create and the policy is accepted.
	l := "object.secrets"
	budget := saPolicy("e2e-budget", admissionregistrationv1.Validation{
		Expression: l + ".all(a, " + l + ".all(b, " + l + ".all(c, " + l + ".all(d, " + l + ".all(e, " + l + ".all(f, " + l + ".all(g, a.name.size() + g.name.size() >= 0)))))))",
	})
	budget.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "budget", Expression: "has(object.metadata.labels) && 'budget' in object.metadata.labels"}}
	if _, err := policies.Create(ctx, budget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, bind("e2e-budget-b", "e2e-budget", ns, admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	withSecrets := sa("budget-1", map[string]string{"budget": "y"})
	for i := 0; i < 10; i++ {
		withSecrets.Secrets = append(withSecrets.Secrets, corev1.ObjectReference{Name: fmt.Sprintf("s%d", i)})
	}
	err = enforcedSA(admin, withSecrets)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cost limit exceeded") {
		t.Fatalf("an evaluation over the runtime budget: %v", err)
	}
	// With one secret the same policy costs little and admits the write.
	withSecrets.Name, withSecrets.Secrets = "budget-2", withSecrets.Secrets[:1]
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, withSecrets, metav1.CreateOptions{}); err != nil {
		t.Fatalf("an evaluation within the runtime budget: %v", err)
	}

	// The total: a policy's validations share one budget of 10,000,000 per
	// evaluation (kube's RuntimeCELCostBudget). Thirty authorizer checks
	// of 350,000 each, every one within the per-expression limit, run it
	// out, and the write is refused.
	total := saPolicy("e2e-total", admissionregistrationv1.Validation{})
	total.Spec.Validations = nil
	for i := 0; i < 30; i++ {
		total.Spec.Validations = append(total.Spec.Validations, admissionregistrationv1.Validation{
			Expression: fmt.Sprintf("authorizer.group('').resource('secrets').namespace('ns-%d').check('get').allowed() || true", i),
		})
	}
	total.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "total", Expression: "has(object.metadata.labels) && 'total' in object.metadata.labels"}}
	if _, err := policies.Create(ctx, total, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, bind("e2e-total-b", "e2e-total", ns, admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = enforced(admin, "total-1", map[string]string{"total": "y"})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "validation failed due to running out of cost budget, no further validation rules will be run") {
		t.Fatalf("a policy over its total budget: %v", err)
	}

	// request.options is the request's own CreateOptions, as kube's create
	// handler hands it to admission.
	op := saPolicy("e2e-options", admissionregistrationv1.Validation{
		Expression:        "request.options.fieldManager != 'refused-manager'",
		MessageExpression: "'refused: ' + request.options.kind + ' ' + request.options.fieldManager + ' ' + request.options.fieldValidation + ' ' + request.options.dryRun[0]",
	})
	if _, err := policies.Create(ctx, op, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bindings.Create(ctx, bind("e2e-options-b", "e2e-options", ns, admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = nil
	for i := 0; i < 300 && err == nil; i++ {
		_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa("options-1", nil),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "refused-manager", FieldValidation: "Strict"})
		if err == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `refused: CreateOptions refused-manager Strict All`) {
		t.Fatalf("request.options: %v", err)
	}
}
