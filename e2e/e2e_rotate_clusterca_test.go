package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/certs"
)

// servingChain is the chain n's API presents to a client that names no
// server (the serving certificate, with its cross-signed CAs).
func servingChain(t *testing.T, n *node) []*x509.Certificate {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.listen, &tls.Config{
		InsecureSkipVerify: true, // the test verifies the chain itself
		MinVersion:         tls.VersionTLS12,
	})
	if err != nil {
		t.Fatalf("dial %s's API: %v", n.name, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates
}

// verifiesUnder reports whether chain's leaf verifies, with the rest of
// chain as intermediates, under ca alone.
func verifiesUnder(chain []*x509.Certificate, ca *certs.CA) bool {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: ca.Pool(), Intermediates: inter, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// clientOf is a clientset for n that trusts trust alone and presents a
// system:masters certificate of issuer (nil: none). Each call has its own
// transport, which keeps its connections.
func clientOf(t *testing.T, n *node, trust, issuer *certs.CA) *kubernetes.Clientset {
	t.Helper()
	cfg := &rest.Config{Host: n.url(), TLSClientConfig: rest.TLSClientConfig{CAData: trust.CertPEM}}
	if issuer != nil {
		certPEM, keyPEM, err := issuer.Issue(certs.Request{CommonName: "rotation-test", Organization: []string{"system:masters"}, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		cfg.CertData, cfg.KeyData = certPEM, keyPEM
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// rootCAs are the CAs of kube-root-ca.crt in namespace default, by id.
func rootCAs(t *testing.T, n *node) map[string]bool {
	t.Helper()
	cm, err := n.clientset().CoreV1().ConfigMaps("default").Get(context.Background(), "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return pemIDs(t, cm.Data["ca.crt"])
}

// trustBundleCAs are the CAs of signer's ClusterTrustBundle, by id; nil
// unless the signer has exactly one bundle.
func trustBundleCAs(t *testing.T, n *node, signer string) map[string]bool {
	t.Helper()
	l, err := n.clientset().CertificatesV1beta1().ClusterTrustBundles().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.signerName=" + signer})
	if err != nil || len(l.Items) != 1 {
		return nil
	}
	return pemIDs(t, l.Items[0].Spec.TrustBundle)
}

// pemIDs are the ids of the certificates of a PEM bundle.
func pemIDs(t *testing.T, bundle string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	b := []byte(bundle)
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out[certs.CertID(c)] = true
	}
}

// adminIssuer is the CA that issued n's admin kubeconfig's certificate,
// among cas ("" when none).
func adminIssuer(t *testing.T, n *node, cas ...*certs.CA) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(n.kubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		block, _ := pem.Decode(ai.ClientCertificateData)
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, ca := range cas {
			if ca.Issued(leaf) {
				return certs.CertID(ca.Cert)
			}
		}
	}
	return ""
}

// signedBy creates a kube-apiserver-client CSR through n, approves it and
// returns the certificate the built-in signer issued.
func signedBy(t *testing.T, n *node, name string) *x509.Certificate {
	t.Helper()
	ctx := context.Background()
	csrs := n.clientset().CertificatesV1().CertificateSigningRequests()
	c, err := csrs.Create(ctx, newCSR(t, name, certificatesv1.KubeAPIServerClientSignerName), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "True", Reason: "Test", Message: "approved by the rotation test"}}
	if _, err := csrs.UpdateApproval(ctx, name, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var issued []byte
	waitFor(t, 60*time.Second, "CSR "+name+" issued", func() bool {
		got, err := csrs.Get(ctx, name, metav1.GetOptions{})
		issued = nil
		if err == nil {
			issued = got.Status.Certificate
		}
		return len(issued) > 0
	})
	block, _ := pem.Decode(issued)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestE2ERotateClusterCA rotates the cluster CA of a running three-node
// cluster online (issue 29), under writes through the followers:
//
//   - start publishes the new CA beside the old one in kube-root-ca.crt
//     and in each built-in signer's ClusterTrustBundle, and makes every
//     node accept client certificates of it; the serving
//     certificate stays the old CA's, now also verifiable under the new;
//   - promote makes every node serve a certificate of the new CA, chained
//     through the new CA cross-signed by the old, so a client that trusts
//     only the old CA keeps working; CSRs are signed and admin
//     kubeconfigs issued by the new CA;
//   - finish waits until every voter serves the new CA's certificate,
//     then drops the old CA on every node at once: its client
//     certificates fail, even on a connection made before finish;
//   - no write fails and the leader never changes; a follower restarted
//     with the old CA in its CA directory serves the new CA's chain;
//   - a second rotation aborted after promote leaves everything that
//     worked working.
func TestE2ERotateClusterCA(t *testing.T) {
	nodes := startCluster(t, 3, "--runtime-config", "certificates.k8s.io/v1beta1=true", "--feature-gates", "ClusterTrustBundle=true")
	ctx := context.Background()
	leader := leaderOf(t, nodes)
	rotate, mustRotate := nodes[0].rotate, func(args ...string) string { t.Helper(); return nodes[0].mustRotate(t, args...) }
	oldCA := nodes[0].clusterCA(t)
	newCA, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := newCA.PEM()
	if err != nil {
		t.Fatal(err)
	}
	bundleFile := filepath.Join(t.TempDir(), "new-ca.pem")
	if err := os.WriteFile(bundleFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	oldID, newID := certs.CertID(oldCA.Cert), certs.CertID(newCA.Cert)
	waitFor(t, 30*time.Second, "the cluster CAs seeded", func() bool {
		out, err := rotate("cluster-ca", "status")
		return err == nil && strings.Contains(out, oldID)
	})
	// A client of the old CA only, whose connections stay open throughout.
	oldClients := map[string]*kubernetes.Clientset{}
	for _, n := range nodes {
		oldClients[n.name] = clientOf(t, n, oldCA, oldCA)
		if _, err := oldClients[n.name].CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("the old CA's client on %s before the rotation: %v", n.name, err)
		}
	}

	stopWrites := writeThrough(t, followersOf(nodes, leader), 1200, configMapWriter("clusterca"))

	// The node CA is refused as a cluster CA (its client certificates
	// would pass for nodes), and nothing changes.
	nodeCA, err := certs.LoadNodeCA(nodes[0].caDir)
	if err != nil {
		t.Fatal(err)
	}
	nodeBundle, err := nodeCA.PEM()
	if err != nil {
		t.Fatal(err)
	}
	nodeBundleFile := filepath.Join(t.TempDir(), "node-ca.pem")
	if err := os.WriteFile(nodeBundleFile, nodeBundle, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := rotate("cluster-ca", "start", "--key-file", nodeBundleFile); err == nil || !strings.Contains(out, "already a CA of another kind") || strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("start with the node CA: %v\n%s", err, out)
	}
	if out := mustRotate("cluster-ca", "status"); strings.Contains(out, "pending") {
		t.Fatalf("a refused start changed the cluster CAs:\n%s", out)
	}

	out := mustRotate("cluster-ca", "start", "--key-file", bundleFile)
	if !strings.Contains(out, newID+" is pending") || strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("start:\n%s", out)
	}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, n.name+" accepts a client certificate of the new CA", func() bool {
			_, err := clientOf(t, n, oldCA, newCA).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		})
		// The node trusts the new CA (above) a moment before it serves
		// the chain that the new CA verifies: both follow the same
		// record, in that order.
		waitFor(t, 30*time.Second, n.name+" serves a certificate of the old CA that the new CA verifies", func() bool {
			chain := servingChain(t, n)
			return oldCA.Issued(chain[0]) && verifiesUnder(chain, newCA)
		})
	}
	waitFor(t, 30*time.Second, "kube-root-ca.crt and the signers' ClusterTrustBundles hold both CAs", func() bool {
		for _, cas := range []map[string]bool{rootCAs(t, nodes[1]), trustBundleCAs(t, nodes[1], "kubernetes.io/kube-apiserver-serving"), trustBundleCAs(t, nodes[1], certificatesv1.KubeAPIServerClientSignerName), trustBundleCAs(t, nodes[1], certificatesv1.KubeletServingSignerName)} {
			if len(cas) != 2 || !cas[oldID] || !cas[newID] {
				return false
			}
		}
		return true
	})

	waitFor(t, 30*time.Second, "every voter trusts the new CA", func() bool {
		_, err := rotate("cluster-ca", "promote")
		return err == nil
	})
	for _, n := range nodes {
		waitFor(t, 30*time.Second, n.name+" serves a certificate of the new CA", func() bool {
			return newCA.Issued(servingChain(t, n)[0])
		})
		if chain := servingChain(t, n); !verifiesUnder(chain, oldCA) || !verifiesUnder(chain, newCA) {
			t.Fatalf("after promote %s's chain verifies under the old CA: %v, the new: %v", n.name, verifiesUnder(chain, oldCA), verifiesUnder(chain, newCA))
		}
		if _, err := oldClients[n.name].CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("the old CA's client on %s after promote: %v", n.name, err)
		}
		if _, err := clientOf(t, n, oldCA, oldCA).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("a new connection of the old CA's client to %s after promote: %v", n.name, err)
		}
		waitFor(t, 30*time.Second, n.name+"'s admin kubeconfig issued by the new CA", func() bool {
			return adminIssuer(t, n, oldCA, newCA) == newID
		})
	}
	waitFor(t, 60*time.Second, "a CSR signed by the new CA", func() bool {
		return newCA.Issued(signedBy(t, nodes[2], fmt.Sprintf("after-promote-%d", time.Now().UnixNano())))
	})

	waitFor(t, 60*time.Second, "every voter serves the new CA", func() bool {
		_, err := rotate("cluster-ca", "finish")
		return err == nil
	})
	if failed := stopWrites(); len(failed) > 0 {
		t.Fatalf("%d writes failed during the rotation, first: %s", len(failed), failed[0])
	}
	for _, n := range nodes {
		// The old CA's certificate fails on every node at once, on the
		// connection made before finish too (its TLS was verified then).
		waitFor(t, 10*time.Second, n.name+" refuses the old CA's certificate", func() bool {
			_, err := oldClients[n.name].CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return apierrors.IsUnauthorized(err)
		})
		if _, err := clientOf(t, n, newCA, oldCA).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
			t.Fatalf("%s accepts a new connection with a certificate of the old CA after finish", n.name)
		}
		if _, err := clientOf(t, n, newCA, newCA).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("a client of the new CA on %s after finish: %v", n.name, err)
		}
		if chain := servingChain(t, n); !newCA.Issued(chain[0]) || !verifiesUnder(chain, newCA) {
			t.Fatalf("after finish %s serves no certificate of the new CA", n.name)
		}
	}
	waitFor(t, 30*time.Second, "kube-root-ca.crt and the signers' ClusterTrustBundles hold the new CA alone", func() bool {
		for _, cas := range []map[string]bool{rootCAs(t, nodes[1]), trustBundleCAs(t, nodes[1], "kubernetes.io/kube-apiserver-serving"), trustBundleCAs(t, nodes[1], certificatesv1.KubeAPIServerClientKubeletSignerName)} {
			if len(cas) != 1 || !cas[newID] {
				return false
			}
		}
		return true
	})
	if l := leaderOf(t, nodes); l != leader {
		t.Fatalf("the leader moved from %s to %s during the rotation", leader.name, l.name)
	}

	// A follower restarted with the old CA directory serves the new CA.
	follower := followersOf(nodes, leader)[0]
	follower.stop()
	follower.start()
	follower.waitReady(60 * time.Second)
	if _, err := createSA(follower.clientset(), "after-cluster-ca"); err != nil {
		t.Fatalf("a write through the restarted follower: %v", err)
	}
	if chain := servingChain(t, follower); !newCA.Issued(chain[0]) {
		t.Fatal("the restarted follower serves no certificate of the new CA")
	}

	// A second rotation, aborted after promote: the first new CA is active
	// again and everything that worked works.
	mustRotate("cluster-ca", "start")
	waitFor(t, 30*time.Second, "every voter trusts the third CA", func() bool {
		_, err := rotate("cluster-ca", "promote")
		return err == nil
	})
	waitFor(t, 30*time.Second, "every node serves the third CA", func() bool {
		for _, n := range nodes {
			if newCA.Issued(servingChain(t, n)[0]) {
				return false
			}
		}
		return true
	})
	out = mustRotate("cluster-ca", "abort")
	if !strings.Contains(out, "aborted") {
		t.Fatalf("abort:\n%s", out)
	}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, n.name+" serves the new CA again", func() bool {
			return newCA.Issued(servingChain(t, n)[0])
		})
		if _, err := clientOf(t, n, newCA, newCA).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("a client of the new CA on %s after abort: %v", n.name, err)
		}
		if _, err := n.clientset().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("the admin kubeconfig of %s after abort: %v", n.name, err)
		}
	}

	// The loopback CA, whose certificates are system:masters on the node
	// that made it, lives in memory only: no file of any node holds it.
	for _, dir := range []string{nodes[0].caDir, nodes[0].dir, nodes[1].dir, nodes[2].dir} {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), "trustplane-loopback") {
				t.Errorf("%s holds the loopback CA's name", p)
			}
			for {
				var block *pem.Block
				if block, b = pem.Decode(b); block == nil {
					return nil
				}
				if c, err := x509.ParseCertificate(block.Bytes); err == nil && c.Subject.CommonName == "trustplane-loopback" {
					t.Errorf("%s holds the loopback CA", p)
				}
			}
		})
	}
}
