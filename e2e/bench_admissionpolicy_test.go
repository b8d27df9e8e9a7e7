package e2e_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// benchPolicy is the i-th policy of BenchmarkAdmissionPolicies: two
// validations an operator might write for ConfigMaps (no forbidden key, a
// DNS-style name by regular expression), matching every ConfigMap create.
// Every object the benchmark creates passes it; a ConfigMap holding the
// key forbidden-<i> does not, which is how the benchmark knows the policy
// is in force.
func benchPolicy(i int) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	name := fmt.Sprintf("bench-%02d", i)
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: fmt.Sprintf("!has(object.data) || !('forbidden-%d' in object.data)", i), Message: "ConfigMaps hold no forbidden key"},
				{Expression: "object.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')", Message: "ConfigMap names are DNS labels"},
			},
		},
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	return p, b
}

// BenchmarkAdmissionPolicies measures ConfigMap creates per second on one
// node (32 client-go clients, JSON) with 0, 1 and 10 admission policies
// that match every create, in that order on one node. Issue 16's target:
// with 10, at most 15% fewer creates than with none.
func BenchmarkAdmissionPolicies(b *testing.B) {
	n := startNode(b)
	cs := clients(b, n, "application/json")
	ctx := context.Background()
	admin := n.clientset()
	var run atomic.Int64
	have := 0
	for _, count := range []int{0, 1, 10} {
		for ; have < count; have++ {
			p, pb := benchPolicy(have)
			if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, pb, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		if count > 0 {
			// The last policy written refuses its key: all are in force.
			probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Data: map[string]string{fmt.Sprintf("forbidden-%d", count-1): "x"}}
			waitFor(b, 30*time.Second, fmt.Sprintf("policy %d in force", count-1), func() bool {
				_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err != nil
			})
		}
		b.Run(fmt.Sprintf("policies-%d", count), func(b *testing.B) {
			prefix := fmt.Sprintf("cm-%d-%d", count, run.Add(1))
			profileDuring(b, n, func() {
				runClients(b, cs, func(cs *kubernetes.Clientset, i int64) error {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}, Data: map[string]string{"k": "v"}}
					_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
					if err != nil {
						return fmt.Errorf("create %s with %d policies: %w", cm.Name, count, err)
					}
					return nil
				})
			})
		})
	}
}
