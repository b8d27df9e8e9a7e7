package e2e_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestE2EMutatingAdmissionPolicy: with admissionregistration.k8s.io/v1alpha1
// served (--runtime-config) and the MutatingAdmissionPolicy gate on,
// kube's plugin applies a policy's mutations, an apply configuration and
// a JSON patch, to the writes its binding selects, dry runs included
// (the answer mutated, nothing stored); other writes are untouched.
func TestE2EMutatingAdmissionPolicy(t *testing.T) {
	n := startNode(t, "--runtime-config", "admissionregistration.k8s.io/v1alpha1=true", "--feature-gates", "MutatingAdmissionPolicy=true")
	ctx := context.Background()
	admin := n.clientset()
	const ns = "e2e-map"
	createNamespace(t, admin, ns)
	policies := admin.AdmissionregistrationV1alpha1()
	policy := &admissionregistrationv1alpha1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-map"},
		Spec: admissionregistrationv1alpha1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1alpha1.MatchResources{ResourceRules: []admissionregistrationv1alpha1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1alpha1.RuleWithOperations{
					Operations: []admissionregistrationv1alpha1.OperationType{admissionregistrationv1alpha1.Create},
					Rule:       admissionregistrationv1alpha1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}}},
			Mutations: []admissionregistrationv1alpha1.Mutation{
				{PatchType: admissionregistrationv1alpha1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1alpha1.ApplyConfiguration{
					Expression: `Object{metadata: Object.metadata{labels: {"mutated": "yes"}}}`}},
				{PatchType: admissionregistrationv1alpha1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1alpha1.JSONPatch{
					Expression: `[JSONPatch{op: "add", path: "/data/added", value: "by-policy"}]`}},
			},
			FailurePolicy:      ptr.To(admissionregistrationv1alpha1.Fail),
			ReinvocationPolicy: admissionregistrationv1alpha1.NeverReinvocationPolicy,
		},
	}
	if _, err := policies.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1alpha1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-map"},
		Spec: admissionregistrationv1alpha1.MutatingAdmissionPolicyBindingSpec{PolicyName: "e2e-map",
			MatchResources: &admissionregistrationv1alpha1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-map": "yes"}}}},
	}
	if _, err := policies.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := func(name string, selected bool) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Data: map[string]string{"k": "v"}}
		if selected {
			c.Labels["e2e-map"] = "yes"
		}
		return c
	}
	cms := admin.CoreV1().ConfigMaps(ns)
	waitFor(t, 30*time.Second, "the policy to be in force", func() bool {
		got, err := cms.Create(ctx, cm("probe", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Labels["mutated"] == "yes"
	})
	dry, err := cms.Create(ctx, cm("dry", true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || dry.Labels["mutated"] != "yes" || dry.Data["added"] != "by-policy" {
		t.Fatalf("a dry run's answer: %v %v", dry, err)
	}
	if _, err := cms.Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry run stored: %v", err)
	}
	if _, err := cms.Create(ctx, cm("real", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stored, err := cms.Get(ctx, "real", metav1.GetOptions{})
	if err != nil || stored.Labels["mutated"] != "yes" || stored.Data["added"] != "by-policy" || stored.Data["k"] != "v" {
		t.Fatalf("the mutations were not stored: %v %v", stored, err)
	}
	if _, err := cms.Create(ctx, cm("unselected", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if other, err := cms.Get(ctx, "unselected", metav1.GetOptions{}); err != nil || other.Labels["mutated"] != "" || other.Data["added"] != "" {
		t.Fatalf("a write the binding does not select was mutated: %v %v", other, err)
	}
}
