package registry

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
)

// TestGCPolicyPrecedence: kube's order for the garbage collector's
// finalizers on delete: orphanDependents, then propagationPolicy, then the
// finalizer the object already has, then the strategy's default.
func TestGCPolicyPrecedence(t *testing.T) {
	policy := func(p metav1.DeletionPropagation) *metav1.DeleteOptions {
		return &metav1.DeleteOptions{PropagationPolicy: &p}
	}
	yes, no := true, false
	for _, tc := range []struct {
		name               string
		opts               *metav1.DeleteOptions
		finalizers         []string
		def                rest.GarbageCollectionPolicy
		orphan, foreground bool
	}{
		{name: "no opinion deletes in the background", opts: &metav1.DeleteOptions{}},
		{name: "nil options are no opinion", opts: nil},
		{name: "Orphan orphans", opts: policy(metav1.DeletePropagationOrphan), orphan: true},
		{name: "Foreground deletes in the foreground", opts: policy(metav1.DeletePropagationForeground), foreground: true},
		{name: "Background overrides an orphan finalizer", opts: policy(metav1.DeletePropagationBackground), finalizers: []string{metav1.FinalizerOrphanDependents}},
		{name: "orphanDependents=true orphans", opts: &metav1.DeleteOptions{OrphanDependents: &yes}, orphan: true},
		{name: "orphanDependents=false overrides a foreground finalizer", opts: &metav1.DeleteOptions{OrphanDependents: &no}, finalizers: []string{metav1.FinalizerDeleteDependents}},
		{name: "an orphan finalizer stands without options", opts: &metav1.DeleteOptions{}, finalizers: []string{"x", metav1.FinalizerOrphanDependents}, orphan: true},
		{name: "a foreground finalizer stands without options", opts: &metav1.DeleteOptions{}, finalizers: []string{metav1.FinalizerDeleteDependents}, foreground: true},
		{name: "a strategy's orphan default applies last", opts: &metav1.DeleteOptions{}, def: rest.OrphanDependents, orphan: true},
		{name: "options beat a strategy's orphan default", opts: policy(metav1.DeletePropagationBackground), def: rest.OrphanDependents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orphan, foreground := gcPolicy(tc.opts, tc.finalizers, tc.def)
			if orphan != tc.orphan || foreground != tc.foreground {
				t.Fatalf("orphan %v, foreground %v; want %v, %v", orphan, foreground, tc.orphan, tc.foreground)
			}
		})
	}
}
