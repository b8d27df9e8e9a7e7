package e2e_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/trustplane/trustplane/api/controllers"
)

// TestE2ESecurityControllersLease: the controllers run on the holder of
// kube-controller-manager's lease, so the lease is what an attacker would
// take to stop them on every node. A ServiceAccount token may neither take
// nor delete it (403, the lease unchanged); an admission policy that
// refuses every write of every lease, as a user who may create policies
// could bind, refuses other leases but not the controllers' renewals,
// which go on, the controllers running throughout. A certificate named
// system:kube-controller-manager that an approver for
// kube-apiserver-client issued may neither take nor delete it either (403,
// unchanged): it has that user's RBAC, not a node component's credential.
func TestE2ESecurityControllersLease(t *testing.T) {
	n := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := n.clientset()
	leases := admin.CoordinationV1().Leases(controllers.LeaseNamespace)
	held := func() *coordinationv1.Lease {
		t.Helper()
		l, err := leases.Get(ctx, controllers.LeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != n.name || l.Spec.RenewTime == nil {
			t.Fatalf("the controllers' lease %+v, want held by %s", l.Spec, n.name)
		}
		return l
	}
	// renewed waits until the lease is renewed after since.
	renewed := func(since time.Time) {
		t.Helper()
		waitFor(t, 30*time.Second, "the controllers' lease renewed", func() bool {
			l, err := leases.Get(ctx, controllers.LeaseName, metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since) &&
				l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == n.name
		})
	}
	wantRunning(t, n)
	started, _ := terms(n)

	t.Run("a ServiceAccount token", func(t *testing.T) {
		if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "lease-thief"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "lease-thief", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		thief, err := kubernetes.NewForConfig(n.tokenConfig(t, tr.Status.Token))
		if err != nil {
			t.Fatal(err)
		}
		before := held()
		taken := before.DeepCopy()
		me, forever := "lease-thief", int32(86400)
		taken.Spec.HolderIdentity, taken.Spec.LeaseDurationSeconds = &me, &forever
		_, err = thief.CoordinationV1().Leases(controllers.LeaseNamespace).Update(ctx, taken, metav1.UpdateOptions{})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, `leases.coordination.k8s.io "kube-controller-manager" is forbidden: User "system:serviceaccount:default:lease-thief" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`)
		err = thief.CoordinationV1().Leases(controllers.LeaseNamespace).Delete(ctx, controllers.LeaseName, metav1.DeleteOptions{})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, `leases.coordination.k8s.io "kube-controller-manager" is forbidden: User "system:serviceaccount:default:lease-thief" cannot delete resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`)
		if l := held(); l.UID != before.UID || *l.Spec.LeaseDurationSeconds != *before.Spec.LeaseDurationSeconds {
			t.Fatalf("the lease changed: %+v, was %+v", l.Spec, before.Spec)
		}
	})

	// Class (d): an approver for kube-apiserver-client issues a
	// certificate named system:kube-controller-manager. It has that
	// user's RBAC, which lets it update the lease, but not the nodes'
	// components' credential: the lease is theirs.
	t.Run("an approved certificate named kube-controller-manager", func(t *testing.T) {
		createClusterRole(t, admin, "e2e-client-approver",
			rbacv1.PolicyRule{Verbs: []string{"create", "get"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}},
			rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval"}},
			rbacv1.PolicyRule{Verbs: []string{"approve"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{certificatesv1.KubeAPIServerClientSignerName}})
		bindClusterRole(t, admin, "e2e-client-approver", "e2e-client-approver", userSubject("client-approver"))
		approver := n.userClientset(t, "client-approver")
		req := makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: controllers.KubeControllerManagerUser}})
		if _, err := approver.CertificatesV1().CertificateSigningRequests().Create(ctx,
			csrObject("e2e-kcm", certificatesv1.KubeAPIServerClientSignerName, req.pem, 3600, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth),
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pending, err := approver.CertificatesV1().CertificateSigningRequests().Get(ctx, "e2e-kcm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pending.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "E2E"}}
		if _, err := approver.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, "e2e-kcm", pending, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		signed := waitCSR(t, admin, "e2e-kcm", 30*time.Second, "issued", issued)
		thief := issuedClient(t, n, signed, req)
		thieves := thief.CoordinationV1().Leases(controllers.LeaseNamespace)
		// It is kube-controller-manager to RBAC: it may read the lease.
		before, err := thieves.Get(ctx, controllers.LeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the certificate cannot read the lease, so it is not kube-controller-manager to RBAC: %v", err)
		}
		reserved := `leases.coordination.k8s.io "kube-controller-manager" is forbidden: the controllers' lease is held by trustplane's nodes, which run the controllers themselves (--controllers); only their own components and system:masters may write it`
		taken := before.DeepCopy()
		me, forever := "lease-thief", int32(86400)
		taken.Spec.HolderIdentity, taken.Spec.LeaseDurationSeconds = &me, &forever
		_, err = thieves.Update(ctx, taken, metav1.UpdateOptions{})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, reserved)
		// kube's ClusterRole for the user grants no delete.
		err = thieves.Delete(ctx, controllers.LeaseName, metav1.DeleteOptions{})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, `leases.coordination.k8s.io "kube-controller-manager" is forbidden: User "system:kube-controller-manager" cannot delete resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`)
		if l := held(); l.UID != before.UID || *l.Spec.LeaseDurationSeconds != *before.Spec.LeaseDurationSeconds {
			t.Fatalf("the lease changed: %+v, was %+v", l.Spec, before.Spec)
		}
		renewed(time.Now())
	})

	t.Run("a policy refusing every lease write", func(t *testing.T) {
		policies := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
		bindings := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-leases"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{
					ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"}},
					}}},
				},
				Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "no leases"}},
			},
		}
		if _, err := policies.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer policies.Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-leases"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        policy.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
		if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer bindings.Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		// The policy is in force once another lease's create is refused.
		other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "e2e-other"}}
		waitFor(t, 30*time.Second, "the policy to refuse a lease", func() bool {
			_, err := leases.Create(ctx, other, metav1.CreateOptions{})
			if err == nil {
				_ = leases.Delete(ctx, other.Name, metav1.DeleteOptions{})
			}
			return apierrors.IsInvalid(err)
		})
		// The controllers' renewals are not refused: the lease is renewed
		// twice more, by the same holder.
		now := time.Now()
		renewed(now)
		renewed(held().Spec.RenewTime.Time)
	})

	if s, stopped := terms(n); s != started || stopped != started-1 {
		t.Fatalf("the controllers' terms went %d → %d started, %d stopped: the lease was lost", started, s, stopped)
	}
}
