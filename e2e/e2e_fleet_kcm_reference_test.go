package e2e_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFleetReferenceControllerManager: kube-controller-manager v1.33 (from
// make reference) is the controller plane of a trustplane node started
// with --controllers=false. It takes its leader lease on the node, its
// controllers get their ServiceAccount tokens from the node's TokenRequest
// (--use-service-account-credentials), and they do on trustplane what they
// do on kube-apiserver: default ServiceAccounts, kube-root-ca.crt,
// namespace deletion, garbage collection, cluster role aggregation, CSR
// signing. (The tokens controller is left out: trustplane's signing keys
// never leave it, and kube-controller-manager would need the private key.)
func TestFleetReferenceControllerManager(t *testing.T) {
	bin := needReference(t)
	n := startNode(t, "--controllers=false")
	ref := &reference{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range ref.procs {
				t.Logf("%s log (tail):\n%s", p.name, logTail(p.log, 6000))
			}
		}
	})
	pki := n.caDirPath()
	ref.launch("kube-controller-manager",
		"--kubeconfig", n.kubeconfigPath(),
		"--bind-address", "127.0.0.1", "--secure-port", strings.Split(freePort(t), ":")[1],
		"--leader-elect=true", "--leader-elect-lease-duration", "15s", "--leader-elect-renew-deadline", "10s", "--leader-elect-retry-period", "2s",
		"--controllers", "serviceaccount,root-ca-cert-publisher,clusterrole-aggregation,csrsigning,csrapproving,garbagecollector,namespace",
		"--use-service-account-credentials",
		"--cluster-signing-cert-file", filepath.Join(pki, "ca.crt"), "--cluster-signing-key-file", filepath.Join(pki, "ca.key"),
		"--root-ca-file", filepath.Join(pki, "ca.crt"))
	ctx := context.Background()
	cs := n.clientset()

	t.Run("its leader lease is on the node", func(t *testing.T) {
		waitForNil(t, 60*time.Second, "the kube-controller-manager lease", func() error {
			l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
			if err == nil && (l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "") {
				return os.ErrNotExist
			}
			return err
		})
	})

	t.Run("a new namespace gets its default ServiceAccount and kube-root-ca.crt", func(t *testing.T) {
		createNamespace(t, cs, "kcm-a")
		waitForNil(t, 60*time.Second, "the default ServiceAccount", func() error {
			_, err := cs.CoreV1().ServiceAccounts("kcm-a").Get(ctx, "default", metav1.GetOptions{})
			return err
		})
		ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		waitForNil(t, 60*time.Second, "kube-root-ca.crt", func() error {
			cm, err := cs.CoreV1().ConfigMaps("kcm-a").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err == nil && !strings.Contains(cm.Data["ca.crt"], strings.TrimSpace(string(ca))) {
				return os.ErrInvalid
			}
			return err
		})
	})

	t.Run("garbage collection deletes a child after its owner", func(t *testing.T) {
		owner, err := cs.CoreV1().ConfigMaps("kcm-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID}}}}
		if _, err := cs.CoreV1().ConfigMaps("kcm-a").Create(ctx, child, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().ConfigMaps("kcm-a").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the child to be collected", func() bool {
			_, err := cs.CoreV1().ConfigMaps("kcm-a").Get(ctx, "child", metav1.GetOptions{})
			return err != nil && strings.Contains(err.Error(), "not found")
		})
	})

	t.Run("cluster role aggregation", func(t *testing.T) {
		agg := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kcm-aggregate"}, AggregationRule: &rbacv1.AggregationRule{
			ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kcm-test/aggregate": "true"}}}}}
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, agg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		part := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kcm-part", Labels: map[string]string{"kcm-test/aggregate": "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, part, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the aggregated rules", func() bool {
			r, err := cs.RbacV1().ClusterRoles().Get(ctx, "kcm-aggregate", metav1.GetOptions{})
			return err == nil && len(r.Rules) == 1 && slices.Equal(r.Rules[0].Verbs, []string{"get"})
		})
	})

	t.Run("an approved CSR is signed by its signer", func(t *testing.T) {
		csrs := cs.CertificatesV1().CertificateSigningRequests()
		if _, err := csrs.Create(ctx, newCSR(t, "kcm-signed", certificatesv1.KubeAPIServerClientSignerName), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.mustKubectl("certificate", "approve", "kcm-signed")
		waitFor(t, 60*time.Second, "the certificate", func() bool {
			c, err := csrs.Get(ctx, "kcm-signed", metav1.GetOptions{})
			return err == nil && len(c.Status.Certificate) > 0
		})
	})

	t.Run("a deleted namespace is emptied and removed", func(t *testing.T) {
		if err := cs.CoreV1().Namespaces().Delete(ctx, "kcm-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, "the namespace to go", func() bool {
			r := do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1/namespaces/kcm-a", nil, nil)
			return r.code == http.StatusNotFound
		})
	})
}
