package e2e_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
