package e2e_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSmoke is the README's first screen: a node starts, bootstraps the
// default namespaces, and kubectl works against it.
func TestSmoke(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "sa/x")
	cs := n.clientset()
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	if out := n.mustKubectl("create", "sa", "x"); out != "serviceaccount/x created" {
		t.Fatalf("kubectl create sa: %q", out)
	}
}
