package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestE2EAdmissionPolicyAudit: a binding with the Audit action, and a
// policy's auditAnnotations, reach the audit log: the create's event
// carries the policy's annotation and kube's validation_failure record,
// as kube-apiserver's admission audit wrapper puts them there.
func TestE2EAdmissionPolicyAudit(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit.log")
	n := startNode(t, "--audit-log-path", logPath, "--audit-policy-file", writeAuditPolicy(t))
	n.trustplaneOnly(t, "the node's audit log file")
	ctx := context.Background()
	admin := n.clientset()
	const ns = "e2e-vap-audited"
	createNamespace(t, admin, ns)
	p := saPolicy("e2e-audit", admissionregistrationv1.Validation{Expression: "false", Message: "always audited"})
	p.Spec.AuditAnnotations = []admissionregistrationv1.AuditAnnotation{{Key: "sa", ValueExpression: "string(object.metadata.name)"}}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx,
		bind("e2e-audit-b", "e2e-audit", ns, admissionregistrationv1.Warn, admissionregistrationv1.Audit), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := createUntilWarned(t, n, "/api/v1/namespaces/"+ns+"/serviceaccounts", "ServiceAccount", nil)
	waitFor(t, 15*time.Second, "the audited create's event", func() bool {
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range auditEvents(t, string(b)) {
			if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Name != name || ev.Stage != "ResponseComplete" {
				continue
			}
			if got := ev.Annotations["e2e-audit/sa"]; got != name {
				t.Fatalf("annotation e2e-audit/sa = %q, want %q (%v)", got, name, ev.Annotations)
			}
			failure := ev.Annotations["validation.policy.admission.k8s.io/validation_failure"]
			if !strings.Contains(failure, `"message":"always audited"`) || !strings.Contains(failure, `"policy":"e2e-audit"`) {
				t.Fatalf("validation_failure annotation %q", failure)
			}
			return true
		}
		return false
	})
}

// createUntilWarned creates objects of kind (audited-0, audited-1, ...)
// at path on n until a create is answered with a Warning header, which is
// when a Warn binding is in force (informers bring it in within a bounded
// wait), and returns that object's name. check, if given, looks at each
// answer first.
func createUntilWarned(t *testing.T, n *node, path, kind string, check func(httpResult)) string {
	t.Helper()
	for i := 0; i < 300; i++ {
		try := fmt.Sprintf("audited-%d", i)
		r := do(t, n.httpClient(), http.MethodPost, n.url()+path, jsonHeader("application/json"),
			[]byte(`{"apiVersion":"v1","kind":"`+kind+`","metadata":{"name":"`+try+`"}}`))
		if r.code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", try, r.code, r.body)
		}
		if check != nil {
			check(r)
		}
		if len(r.header.Values("Warning")) > 0 {
			return try
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the Warn binding never took effect")
	return ""
}
