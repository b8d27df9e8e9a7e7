package e2e_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/certs"
)

// The red team's attacks on the cluster CA's online rotation
// (docs/REDTEAM-cluster-ca.md).

// crossOf is the certificate of n's serving chain that certifies ca's key
// under another CA (the cross-signed CA a rotation presents); nil if none.
func crossOf(t *testing.T, n *node, ca *certs.CA) *x509.Certificate {
	t.Helper()
	for _, c := range servingChain(t, n)[1:] {
		if c.IsCA && certs.SameKey(c, ca.Cert) && !c.Equal(ca.Cert) {
			return c
		}
	}
	return nil
}

// secretsWith lists Secrets on n with a system:masters certificate that
// issuer mints (a leaked key, or any client certificate it issued, such as
// an approved CSR's), presented with extra after it; it returns the HTTP
// status, or 0 when the handshake failed.
func secretsWith(t *testing.T, n *node, issuer *certs.CA, extra ...*x509.Certificate) int {
	t.Helper()
	certPEM, keyPEM, err := issuer.Issue(certs.Request{CommonName: "redteam", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range extra {
		pair.Certificate = append(pair.Certificate, c.Raw)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates:       []tls.Certificate{pair},
		InsecureSkipVerify: true, // the attacker does not care whom it talks to
		MinVersion:         tls.VersionTLS12,
	}}}
	resp, err := client.Get(n.url() + "/api/v1/namespaces/kube-system/secrets")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// CCA-1: the cross-signed CA a node presents during a rotation is public.
// A client certificate of a cluster CA that the rotation dropped (finish
// after start, or abort after promote and then finish), presented with
// that cross as an intermediate, verified under the CA that was kept: a
// leaked key of the dropped CA, the very reason to rotate it, stayed
// system:masters for as long as the cross lived.
func TestRedteamE2EClusterCACrossSignedClientChain(t *testing.T) {
	n := startNode(t)
	oldCA := n.clusterCA(t)
	oldID := certs.CertID(oldCA.Cert)
	waitFor(t, 30*time.Second, "the cluster CAs seeded", func() bool {
		out, err := n.rotate("cluster-ca", "status")
		return err == nil && strings.Contains(out, oldID)
	})
	if code := secretsWith(t, n, oldCA); code != http.StatusOK {
		t.Fatalf("the cluster CA's system:masters before the rotation: %d", code)
	}

	// Rotation 1, finished: the old CA is dropped.
	newCA, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	n.mustRotate(t, "cluster-ca", "start", "--key-file", caBundleFile(t, newCA))
	var oldByNew *x509.Certificate
	waitFor(t, 30*time.Second, "the old CA presented cross-signed by the new", func() bool {
		oldByNew = crossOf(t, n, oldCA)
		return oldByNew != nil
	})
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := n.rotate("cluster-ca", "promote"); return err == nil })
	waitFor(t, 60*time.Second, "finish", func() bool { _, err := n.rotate("cluster-ca", "finish"); return err == nil })
	waitFor(t, 10*time.Second, "the old CA's certificate refused", func() bool { return secretsWith(t, n, oldCA) != http.StatusOK })
	if code := secretsWith(t, n, oldCA, oldByNew); code == http.StatusOK {
		t.Errorf("after finish, a system:masters certificate of the dropped CA, chained through the public cross-signed CA, lists Secrets (%d)", code)
	}

	// Rotation 2, aborted after promote, then finished: the third CA is
	// dropped, and its cross (signed by the kept CA) was public.
	thirdCA, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	n.mustRotate(t, "cluster-ca", "start", "--key-file", caBundleFile(t, thirdCA))
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := n.rotate("cluster-ca", "promote"); return err == nil })
	var thirdByNew *x509.Certificate
	waitFor(t, 30*time.Second, "the third CA presented cross-signed by the second", func() bool {
		thirdByNew = crossOf(t, n, thirdCA)
		return thirdByNew != nil
	})
	n.mustRotate(t, "cluster-ca", "abort")
	waitFor(t, 60*time.Second, "finish", func() bool { _, err := n.rotate("cluster-ca", "finish"); return err == nil })
	waitFor(t, 10*time.Second, "the third CA's certificate refused", func() bool { return secretsWith(t, n, thirdCA) != http.StatusOK })
	if code := secretsWith(t, n, thirdCA, thirdByNew); code == http.StatusOK {
		t.Errorf("after abort and finish, a system:masters certificate of the aborted CA, chained through the public cross-signed CA, lists Secrets (%d)", code)
	}
	// What must keep working does.
	if code := secretsWith(t, n, newCA); code != http.StatusOK {
		t.Fatalf("the kept CA's certificate: %d", code)
	}
}

// caBundleFile writes ca's certificate and key for rotate --key-file.
func caBundleFile(t *testing.T, ca *certs.CA) string {
	t.Helper()
	b, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// CCA-3: an operator's mistake the start check exists for. A node whose
// kubelet-serving signer has its own CA (so that its approvers cannot
// issue what the API's clients trust) is told to make that CA the cluster
// CA: start refuses it, as it refuses a node CA, and nothing changes.
func TestRedteamE2EClusterCAStartRefusesOwnSignerCA(t *testing.T) {
	own, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "serving-ca.crt"), filepath.Join(dir, "serving-ca.key")
	if err := own.WriteFiles(crt, key); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "--cluster-signing-kubelet-serving-cert-file", crt, "--cluster-signing-kubelet-serving-key-file", key)
	oldID := certs.CertID(n.clusterCA(t).Cert)
	waitFor(t, 30*time.Second, "the cluster CAs seeded", func() bool {
		out, err := n.rotate("cluster-ca", "status")
		return err == nil && strings.Contains(out, oldID)
	})
	out, err := n.rotate("cluster-ca", "start", "--key-file", caBundleFile(t, own))
	if err == nil || !strings.Contains(out, "already a CA of another kind") || strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("start with the kubelet-serving signer's own CA: %v\n%s", err, out)
	}
	if out := n.mustRotate(t, "cluster-ca", "status"); strings.Contains(out, "pending") {
		t.Fatalf("a refused start changed the cluster CAs:\n%s", out)
	}
}

// CCA-6 (not fixed): a voter down while the rotation is finished with
// --force restarts with the CAs of its trust file, the dropped one among
// them, and serves the API before it has replayed finish: until its
// caught-up sync (up to Run's 5 s tick after the replay) it accepts a
// client certificate of the dropped CA, a leaked key's system:masters
// among them, and forwards that identity's writes to the leader in
// X-Remote-* headers, which the leader believes from a node.
func TestRedteamE2EClusterCARestartedNodeMissedFinish(t *testing.T) {
	t.Skip("CCA-6: a node restarted after missing finish accepts the dropped cluster CA until it has caught up; proposed fix in docs/REDTEAM-cluster-ca.md")
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	oldCA := nodes[0].clusterCA(t)
	oldID := certs.CertID(oldCA.Cert)
	waitFor(t, 30*time.Second, "the cluster CAs seeded", func() bool {
		out, err := leader.rotate("cluster-ca", "status")
		return err == nil && strings.Contains(out, oldID)
	})
	leader.mustRotate(t, "cluster-ca", "start")
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := leader.rotate("cluster-ca", "promote"); return err == nil })
	down := followersOf(nodes, leader)[0]
	waitFor(t, 30*time.Second, down.name+" serves the new CA", func() bool { return !oldCA.Issued(servingChain(t, down)[0]) })
	down.stop()
	leader.mustRotate(t, "cluster-ca", "finish", "--force")
	down.start()
	accepted := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if secretsWith(t, down, oldCA) == http.StatusOK {
			accepted++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if accepted > 0 {
		t.Fatalf("%s, restarted after missing finish, accepted the dropped CA's system:masters %d times", down.name, accepted)
	}
}
