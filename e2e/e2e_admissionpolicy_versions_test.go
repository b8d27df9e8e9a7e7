package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestE2EAdmissionPolicyRollback checks the CEL compatibility rules across
// releases on a real node: an expression may use only the libraries of the
// server's compatibility version (the release before the one it emulates),
// so a policy written with a newer library is refused; and after a
// rollback (the node restarted with --emulated-version one release back)
// a stored policy whose library the rolled-back release would refuse keeps
// being enforced, and can still be updated around its expressions.
func TestE2EAdmissionPolicyRollback(t *testing.T) {
	n := startNode(t)
	n.needsProcess("restart")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns = "e2e-vap-rollback"
	createNamespace(t, n.clientset(), ns)

	wantVersions := func(emulation, compatibility string) {
		t.Helper()
		v, err := n.clientset().Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.EmulationMajor != "1" || v.EmulationMinor != emulation || v.MinCompatibilityMajor != "1" || v.MinCompatibilityMinor != compatibility {
			t.Fatalf("/version: emulation %s.%s, compatibility %s.%s; want 1.%s and 1.%s",
				v.EmulationMajor, v.EmulationMinor, v.MinCompatibilityMajor, v.MinCompatibilityMinor, emulation, compatibility)
		}
	}
	wantVersions("33", "32")
	policies := n.clientset().AdmissionregistrationV1().ValidatingAdmissionPolicies()

	// The semver library came in 1.33: newer than 1.32, the compatibility
	// version of a 1.33 server.
	_, err := policies.Create(ctx, saPolicy("e2e-semver", admissionregistrationv1.Validation{Expression: "isSemver(object.metadata.name)"}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `spec.validations[0].expression`) || !strings.Contains(err.Error(), "undeclared reference to 'isSemver'") {
		t.Fatalf("a 1.33 library at compatibility 1.32: %v", err)
	}

	// Two-variable comprehensions came in 1.32: allowed now.
	twoVar := admissionregistrationv1.Validation{
		Expression: "!has(object.metadata.labels) || object.metadata.labels.all(k, v, v != 'forbidden')",
		Message:    "no label may say forbidden",
	}
	if _, err := policies.Create(ctx, saPolicy("e2e-two-var", twoVar), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a 1.32 library at compatibility 1.32: %v", err)
	}
	if _, err := n.clientset().AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx,
		bind("e2e-two-var-b", "e2e-two-var", ns, admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := func(name string) {
		t.Helper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": "forbidden"}}}
		for i := 0; i < 300; i++ {
			_, err := n.clientset().CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
			if err != nil {
				wantAPIError(t, err, 422, metav1.StatusReasonInvalid,
					`serviceaccounts "`+name+`" is forbidden: ValidatingAdmissionPolicy 'e2e-two-var' with binding 'e2e-two-var-b' denied request: no label may say forbidden`)
				return
			}
			if err := n.clientset().CoreV1().ServiceAccounts(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("a create of %s was never refused", name)
	}
	refused("before")

	// Roll back to 1.32, whose compatibility version is 1.31.
	n.args = append(n.args, "--emulated-version=1.32")
	n.restart()
	wantVersions("32", "31")
	_, err = policies.Create(ctx, saPolicy("e2e-two-var-new", twoVar), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `spec.validations[0].expression`) {
		t.Fatalf("a 1.32 library at compatibility 1.31: %v", err)
	}
	// The stored policy keeps evaluating...
	refused("after")
	// ...and can be updated while its expression stays as stored.
	p, err := policies.Get(ctx, "e2e-two-var", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Validations[0].Message = "no label may say forbidden (rolled back)"
	if p, err = policies.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating a stored policy around its expression: %v", err)
	}
	p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: "object.metadata.labels.all(k, v, k != v)"})
	if _, err := policies.Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `spec.validations[1].expression`) {
		t.Fatalf("adding a 1.32 expression at compatibility 1.31: %v", err)
	}
}
