package registry

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// policyEnv is a node serving the core resources and the admission policy
// kinds, whose paramKind checks an authorizer that denies everything
// (the test admin, in system:masters, skips them as in kube).
func policyEnv(t *testing.T) *env {
	t.Helper()
	var served *Registry
	e := newEnvWith(t, append(CoreResources(), AdmissionPolicyResources(authorizerfactory.NewAlwaysDenyAuthorizer(), func() *Registry { return served })...),
		func(cfg *storage.Config, f *fsm.FSM) { cfg.Feed = f })
	served = e.reg
	return e
}

// saPolicy is a valid policy on ServiceAccounts with expression, with
// the defaults v1's decoding gives.
func saPolicy(name, expression string) *admissionregistration.ValidatingAdmissionPolicy {
	fail, equivalent := admissionregistration.Fail, admissionregistration.Equivalent
	return &admissionregistration.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistration.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistration.MatchResources{
				MatchPolicy: &equivalent, NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
				ResourceRules: []admissionregistration.NamedRuleWithOperations{{RuleWithOperations: admissionregistration.RuleWithOperations{
					Operations: []admissionregistration.OperationType{admissionregistration.Create},
					Rule:       admissionregistration.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"serviceaccounts"}},
				}}},
			},
			Validations: []admissionregistration.Validation{{Expression: expression}},
		},
	}
}

func TestAdmissionPolicyValidation(t *testing.T) {
	e := policyEnv(t)
	policies, bindings := e.reg.Store(ValidatingAdmissionPoliciesGVR), e.reg.Store(ValidatingAdmissionPolicyBindingsGVR)
	// A user outside system:masters is checked by the (denying) authorizer.
	bob := genericapirequest.WithUser(e.in(""), &user.DefaultInfo{Name: "bob", Groups: []string{user.AllAuthenticated}})

	withParams := saPolicy("with-params", "true")
	withParams.Spec.ParamKind = &admissionregistration.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	noValidations := saPolicy("empty", "true")
	noValidations.Spec.Validations = nil
	// 30 authorizer checks: 30 times 350,004 is over 10,000,000.
	checks := "authorizer.group('').resource('secrets').check('get').allowed()"
	for i := 1; i < 30; i++ {
		checks += " && authorizer.group('').resource('secrets').check('get').allowed()"
	}
	// A comprehension over 2,000 literals inside one over 2,000: millions.
	var literals strings.Builder
	for i := 0; i < 2000; i++ {
		if i > 0 {
			literals.WriteString(",")
		}
		fmt.Fprint(&literals, i)
	}
	nested := fmt.Sprintf("[%s].all(x, [%s].all(y, x != y || x == y))", literals.String(), literals.String())
	costlyMessage := saPolicy("costly-message", "true")
	costlyMessage.Spec.Validations[0].MessageExpression = fmt.Sprintf("[%s].all(x, [%s].all(y, x != y)) ? 'a' : 'b'", literals.String(), literals.String())
	for _, tc := range []struct {
		name   string
		policy *admissionregistration.ValidatingAdmissionPolicy
		asBob  bool // else the admin
		// want is the whole Status message; "" means created.
		want string
	}{
		{name: "a valid policy is created", policy: saPolicy("valid", "object.automountServiceAccountToken == false")},
		{
			name: "an expression that does not compile is refused with CEL's error", policy: saPolicy("bad", "object.foo =="),
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "bad" is invalid: spec.validations[0].expression: Invalid value: "object.foo ==": compilation failed: ERROR: <input>:1:14: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
 | object.foo ==
 | .............^`,
		},
		{
			name: "an expression of the wrong type is refused", policy: saPolicy("not-bool", "'yes'"),
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "not-bool" is invalid: spec.validations[0].expression: Invalid value: "'yes'": must evaluate to bool but got string`,
		},
		{
			name: "a policy needs validations or audit annotations", policy: noValidations,
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "empty" is invalid: [spec.validations: Required value: validations or auditAnnotations must contain at least one item, spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item]`,
		},
		{
			name: "a worst-case cost over the limit is refused with kube's message", policy: saPolicy("costly", checks),
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "costly" is invalid: spec.validations[0].expression: Forbidden: estimated rule cost exceeds budget by factor of 1.050012x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)`,
		},
		{
			name: "nested comprehensions over literals", policy: saPolicy("nested", nested),
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "nested" is invalid: spec.validations[0].expression: Forbidden: estimated rule cost exceeds budget by factor of 3.6x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)`,
		},
		{
			name: "a messageExpression is estimated too", policy: costlyMessage,
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "costly-message" is invalid: spec.validations[0].messageExpression: Forbidden: estimated messageExpression cost exceeds budget by factor of 2.4x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)`,
		},
		// A cost that grows with the object has no finite worst case: the
		// runtime budget bounds it, as in kube.
		{name: "a cost bounded only by the object is created", policy: saPolicy("per-secret", "object.secrets.all(s, s.name.startsWith('x') && object.secrets.all(t, t.name != ''))")},
		{
			name: "paramKind is authorised", policy: withParams, asBob: true,
			want: `ValidatingAdmissionPolicy.admissionregistration.k8s.io "with-params" is invalid: spec.paramKind: Forbidden: user &{bob  [system:authenticated] map[]} must have "get" permission on all objects of the referenced paramKind (kind=ConfigMap, apiVersion=v1)`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := e.in("")
			if tc.asBob {
				ctx = bob
			}
			out, err := policies.Create(ctx, tc.policy, false)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p := out.(*admissionregistration.ValidatingAdmissionPolicy); p.Generation != 1 {
					t.Errorf("generation %d, want 1", p.Generation)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422 Invalid", err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("message\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}

	t.Run("an update's new expressions are estimated", func(t *testing.T) {
		created, err := policies.Create(e.in(""), saPolicy("grows", "true"), false)
		if err != nil {
			t.Fatal(err)
		}
		p := created.(*admissionregistration.ValidatingAdmissionPolicy).DeepCopy()
		p.Spec.Validations = append(p.Spec.Validations, admissionregistration.Validation{Expression: checks})
		_, err = policies.Update(e.in(""), p.Name, rest.DefaultUpdatedObjectInfo(p), false)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.validations[1].expression: Forbidden: estimated rule cost exceeds budget") {
			t.Fatalf("got %v, want the cost refusal", err)
		}
		// The refused update changed nothing.
		stored, err := policies.Get(e.in(""), p.Name, &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sp := stored.(*admissionregistration.ValidatingAdmissionPolicy); len(sp.Spec.Validations) != 1 || sp.Generation != 1 {
			t.Fatalf("after the refusal: %d validations, generation %d; want 1 and 1", len(sp.Spec.Validations), sp.Generation)
		}
	})

	t.Run("a binding names its policy and actions", func(t *testing.T) {
		b := &admissionregistration.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "b"},
			Spec:       admissionregistration.ValidatingAdmissionPolicyBindingSpec{PolicyName: "valid"},
		}
		_, err := bindings.Create(e.in(""), b, false)
		if want := `ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "b" is invalid: spec.validationActions: Required value: at least one validation action is required`; err == nil || err.Error() != want {
			t.Fatalf("got %v, want %s", err, want)
		}
		b.Spec.ValidationActions = []admissionregistration.ValidationAction{admissionregistration.Deny}
		if _, err := bindings.Create(e.in(""), b, false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAdmissionPolicyStatus checks that status is written only through the
// status subresource and that a spec change is a new generation.
func TestAdmissionPolicyStatus(t *testing.T) {
	e := policyEnv(t)
	policies := e.reg.Store(ValidatingAdmissionPoliciesGVR)
	ctx := e.in("")
	p := saPolicy("p", "true")
	p.Status.ObservedGeneration = 7 // dropped at create
	out, err := policies.Create(ctx, p, false)
	if err != nil {
		t.Fatal(err)
	}
	p = out.(*admissionregistration.ValidatingAdmissionPolicy)
	if p.Status.ObservedGeneration != 0 {
		t.Fatalf("status kept at create: %+v", p.Status)
	}

	checked := p.DeepCopy()
	checked.Status = admissionregistration.ValidatingAdmissionPolicyStatus{
		ObservedGeneration: 1,
		TypeChecking:       &admissionregistration.TypeChecking{ExpressionWarnings: []admissionregistration.ExpressionWarning{{FieldRef: "spec.validations[0].expression", Warning: "a warning"}}},
	}
	out, err = policies.UpdateSubresource(ctx, "status", "p", rest.DefaultUpdatedObjectInfo(checked), false)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*admissionregistration.ValidatingAdmissionPolicy); got.Status.TypeChecking == nil || got.Generation != 1 {
		t.Fatalf("status update: generation %d, status %+v", got.Generation, got.Status)
	}

	changed := out.(*admissionregistration.ValidatingAdmissionPolicy).DeepCopy()
	changed.Spec.Validations[0].Expression = "false"
	changed.Status = admissionregistration.ValidatingAdmissionPolicyStatus{}
	out, err = policies.Update(ctx, "p", rest.DefaultUpdatedObjectInfo(changed), false)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*admissionregistration.ValidatingAdmissionPolicy)
	if got.Generation != 2 || got.Status.TypeChecking == nil {
		t.Fatalf("spec update: generation %d (want 2), status %+v (want kept)", got.Generation, got.Status)
	}

	// A PUT without a resourceVersion is refused, as kube's strategy does
	// not allow unconditional updates.
	changed = got.DeepCopy()
	changed.ResourceVersion = ""
	changed.Labels = map[string]string{"changed": "yes"}
	_, err = policies.Update(ctx, "p", rest.DefaultUpdatedObjectInfo(changed), false)
	if want := `validatingadmissionpolicies.admissionregistration.k8s.io "p" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	// A patch without one is applied to the current object, as kube's
	// patch handler does.
	out, err = policies.Update(ctx, "p", reappliedInfo{rest.DefaultUpdatedObjectInfo(changed)}, false)
	if err != nil {
		t.Fatalf("reapplied update: %v", err)
	}
	if rv := out.(*admissionregistration.ValidatingAdmissionPolicy).ResourceVersion; rv == got.ResourceVersion || rv == "" {
		t.Fatalf("reapplied update: resourceVersion %q after %q", rv, got.ResourceVersion)
	}
}

// reappliedInfo is an update that says it is computed from the current
// object (Reapplied), as the API's patch and apply are.
type reappliedInfo struct{ rest.UpdatedObjectInfo }

func (reappliedInfo) ReappliesToCurrent() bool { return true }

func TestRegistryResolve(t *testing.T) {
	e := policyEnv(t)
	for _, tc := range []struct {
		name string
		gvk  schema.GroupVersionKind
		want schema.GroupVersionResource
	}{
		{name: "a served kind resolves to its resource", gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, want: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
		{name: "a served policy kind", gvk: AdmissionRegistrationGroupVersion.WithKind("ValidatingAdmissionPolicy"), want: ValidatingAdmissionPoliciesGVR},
		{name: "an unserved version does not", gvk: schema.GroupVersionKind{Version: "v2", Kind: "ConfigMap"}},
		{name: "an unknown kind does not", gvk: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.reg.Resolve(tc.gvk)
			if tc.want.Empty() {
				if !meta.IsNoMatchError(err) {
					t.Fatalf("got %v, %v; want a NoKindMatchError", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
