package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/certs"
)

// TestE2ERotateSignerCA rotates the CA of a built-in signer given CA files
// of its own (--cluster-signing-kube-apiserver-client-*) online (issue
// 29): start publishes the new CA beside the old in the signer's
// ClusterTrustBundle and makes the API accept client certificates of it;
// promote makes the signer sign new CSRs with it; finish waits for the
// longest lifetime of a certificate the old CA issued (--force takes it
// now), then a certificate of the old signer CA gets 401. A signer left
// at its default has no CA of its own to rotate, and the cluster CA does
// not move.
func TestE2ERotateSignerCA(t *testing.T) {
	dir := t.TempDir()
	old, err := certs.NewSignerCA("kube-apiserver-client")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.WriteFiles(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "--cluster-signing-kube-apiserver-client-cert-file", filepath.Join(dir, "client.crt"),
		"--cluster-signing-kube-apiserver-client-key-file", filepath.Join(dir, "client.key"),
		"--runtime-config", "certificates.k8s.io/v1beta1=true", "--feature-gates", "ClusterTrustBundle=true")
	ctx := context.Background()
	const signer = certificatesv1.KubeAPIServerClientSignerName
	cluster := n.clusterCA(t)
	oldID := certs.CertID(old.Cert)
	rotate := func(args ...string) (string, error) { return n.rotate(append(args, "--signer", signer)...) }

	if out, err := n.rotate("signer-ca", "status", "--signer", certificatesv1.KubeletServingSignerName); err == nil || !strings.Contains(out, "signs with the cluster CA") {
		t.Fatalf("status of a signer without CA files of its own: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "the signer's CAs seeded", func() bool {
		out, err := rotate("signer-ca", "status")
		return err == nil && strings.Contains(out, oldID)
	})
	if !old.Issued(signedBy(t, n, "before-rotation")) {
		t.Fatal("the signer does not sign with its own CA")
	}
	oldClient := clientOf(t, n, cluster, old)
	if _, err := oldClient.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("a certificate of the signer's CA: %v", err)
	}

	out, err := rotate("signer-ca", "start")
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	var newID string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "pending" {
			newID = f[0]
		}
	}
	waitFor(t, 30*time.Second, "the signer's ClusterTrustBundle holds both CAs", func() bool {
		cas := trustBundleCAs(t, n, signer)
		return len(cas) == 2 && cas[oldID] && cas[newID]
	})
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := rotate("signer-ca", "promote"); return err == nil })
	var renewed string
	waitFor(t, 60*time.Second, "a CSR signed by the new signer CA", func() bool {
		c := signedBy(t, n, "after-promote-"+time.Now().Format("150405.000000000"))
		if old.Issued(c) {
			return false
		}
		renewed = certs.CertID(c)
		return true
	})
	_ = renewed
	if _, err := oldClient.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("a certificate of the old signer CA after promote: %v", err)
	}

	// finish waits for the old CA's certificates to expire.
	if out, err := rotate("signer-ca", "finish"); err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("finish before the old CA's certificates expired: %v\n%q", err, out)
	}
	if _, err := rotate("signer-ca", "finish", "--force"); err != nil {
		t.Fatalf("finish --force: %v", err)
	}
	waitFor(t, 10*time.Second, "a certificate of the old signer CA refused", func() bool {
		_, err := oldClient.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return apierrors.IsUnauthorized(err)
	})
	waitFor(t, 30*time.Second, "the signer's ClusterTrustBundle holds the new CA alone", func() bool {
		cas := trustBundleCAs(t, n, signer)
		return len(cas) == 1 && cas[newID]
	})
	if _, err := n.clientset().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("the admin kubeconfig (cluster CA) after the signer's rotation: %v", err)
	}
	if out, _ := n.rotate("cluster-ca", "status"); !strings.Contains(out, certs.CertID(cluster.Cert)) || strings.Contains(out, "pending") {
		t.Fatalf("the cluster CA moved with the signer's:\n%s", out)
	}
	// The signer's files seeded the set; they are never written.
	if b, _ := os.ReadFile(filepath.Join(dir, "client.crt")); string(b) != string(old.CertPEM) {
		t.Fatal("the signer's CA file was rewritten")
	}
}
