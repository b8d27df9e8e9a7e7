package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/certs"
)

// keyedCSR is a certificate request and the key it was made with.
type keyedCSR struct {
	key *ecdsa.PrivateKey
	pem []byte
}

func makeKeyedCSR(t testing.TB, tmpl *x509.CertificateRequest) keyedCSR {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return keyedCSR{key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})}
}

func csrObject(name, signer string, req []byte, seconds int32, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	c := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: signer, Usages: usages},
	}
	if seconds > 0 {
		c.Spec.ExpirationSeconds = &seconds
	}
	return c
}

// waitCSR polls the CSR until done says so, failing after timeout.
func waitCSR(t testing.TB, cs kubernetes.Interface, name string, timeout time.Duration, what string, done func(*certificatesv1.CertificateSigningRequest) bool) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var last *certificatesv1.CertificateSigningRequest
	waitFor(t, timeout, "CSR "+name+" "+what, func() bool {
		c, err := cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = c
		return done(c)
	})
	return last
}

// issuedClient is a clientset authenticating with the certificate signed
// for req's CSR.
func issuedClient(t testing.TB, n *node, signed *certificatesv1.CertificateSigningRequest, req keyedCSR) *kubernetes.Clientset {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(req.key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := n.restConfig()
	cfg.CertFile, cfg.KeyFile = "", ""
	cfg.CertData, cfg.KeyData = signed.Status.Certificate, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func issued(c *certificatesv1.CertificateSigningRequest) bool { return len(c.Status.Certificate) > 0 }

func condition(c *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func parseIssued(t testing.TB, c *certificatesv1.CertificateSigningRequest) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(c.Status.Certificate)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("CSR %s: status.certificate is not a PEM certificate", c.Name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestCSRSigning is the whole path of a client certificate: a user creates
// a CSR, an approver approves it with kubectl, the kube-apiserver-client
// signer issues it for the requested duration, and the certificate then
// authenticates as its CN and O. It also checks who may approve, the
// kubelet signers' rules, that Denied and custom-signer CSRs are never
// signed, and the kubelet client auto-approval.
func TestCSRSigning(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	createClusterRole(t, admin, "csr-requester", rbacv1.PolicyRule{
		Verbs: []string{"create", "get", "list", "watch"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}})
	createClusterRole(t, admin, "csr-approval-writer", rbacv1.PolicyRule{
		Verbs: []string{"update"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval"}})
	bindClusterRole(t, admin, "alice-requests", "csr-requester", userSubject("alice"))
	bindClusterRole(t, admin, "alice-approval", "csr-approval-writer", userSubject("alice"))
	alice := n.userClientset(t, "alice")

	// alice asks for a one-hour client certificate for "robot" in "team-a".
	req := makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "robot", Organization: []string{"team-a"}}})
	_, err := alice.CertificatesV1().CertificateSigningRequests().Create(ctx,
		csrObject("robot", certificatesv1.KubeAPIServerClientSignerName, req.pem, 3600, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth),
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// alice may update /approval but holds no approve on the signer: 403.
	pending, err := alice.CertificatesV1().CertificateSigningRequests().Get(ctx, "robot", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pending.Spec.Username != "alice" {
		t.Fatalf("spec.username = %q, want alice", pending.Spec.Username)
	}
	pending.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "True", Reason: "Self"}}
	_, err = alice.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, "robot", pending, metav1.UpdateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
		`certificatesigningrequests.certificates.k8s.io "robot" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client"`)
	// Nothing signs a request nobody approved.
	if c, _ := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "robot", metav1.GetOptions{}); issued(c) || len(c.Status.Conditions) != 0 {
		t.Fatalf("an unapproved CSR changed: %+v", c.Status)
	}

	// An approver with approve on the signer (here the admin) approves with kubectl.
	n.mustKubectl("certificate", "approve", "robot")
	signed := waitCSR(t, admin, "robot", 30*time.Second, "issued", issued)
	cert := parseIssued(t, signed)
	if cert.Subject.CommonName != "robot" || strings.Join(cert.Subject.Organization, ",") != "team-a" {
		t.Fatalf("issued subject %v", cert.Subject)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life < time.Hour || life > time.Hour+10*time.Minute {
		t.Fatalf("issued lifetime %v, want one hour (plus kube's backdating)", life)
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("issued extended key usages %v, want client auth", cert.ExtKeyUsage)
	}
	if !strings.Contains(n.mustKubectl("get", "csr", "robot"), "Approved,Issued") {
		t.Fatal("kubectl get csr does not show Approved,Issued")
	}

	// The certificate authenticates: SelfSubjectReview shows its CN and O.
	keyDER, err := x509.MarshalECPrivateKey(req.key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := n.restConfig()
	cfg.TLSClientConfig = rest.TLSClientConfig{CAData: cfg.TLSClientConfig.CAData, CertData: signed.Status.Certificate,
		KeyData: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
	if cfg.CAData == nil {
		cfg.TLSClientConfig.CAFile = n.restConfig().CAFile
	}
	robot, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ssr, err := robot.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ui := ssr.Status.UserInfo; ui.Username != "robot" || strings.Join(ui.Groups, ",") != "team-a,system:authenticated" {
		t.Fatalf("the issued certificate authenticates as %q %v, want robot [team-a system:authenticated]", ui.Username, ui.Groups)
	}
	if _, err := tls.X509KeyPair(signed.Status.Certificate, cfg.KeyData); err != nil {
		t.Fatalf("issued certificate does not match the request's key: %v", err)
	}

	csrs := admin.CertificatesV1().CertificateSigningRequests()
	create := func(c *certificatesv1.CertificateSigningRequest) {
		t.Helper()
		if _, err := csrs.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CSR %s: %v", c.Name, err)
		}
	}
	nodeSubject := pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}

	// Signer rules: a kubelet client certificate must be system:node:<name>
	// in system:nodes; one that is not fails with a reason and no certificate.
	create(csrObject("kubelet-client-wrong-cn", certificatesv1.KubeAPIServerClientKubeletSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "robot", Organization: []string{"system:nodes"}}}).pem, 0,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth))
	// A kubelet serving certificate may not carry an email address.
	create(csrObject("kubelet-serving-email", certificatesv1.KubeletServingSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: nodeSubject, EmailAddresses: []string{"a@b.c"}, DNSNames: []string{"n1.example"}}).pem, 0,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth))
	// A good kubelet serving certificate: DNS and IP SANs, server auth.
	create(csrObject("kubelet-serving-ok", certificatesv1.KubeletServingSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"n1.example"}}).pem, 0,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth))
	// Denied and custom-signer requests are never signed.
	create(csrObject("denied", certificatesv1.KubeAPIServerClientSignerName, makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "d"}}).pem, 0,
		certificatesv1.UsageClientAuth))
	create(csrObject("custom", "example.com/custom", makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "c"}}).pem, 0,
		certificatesv1.UsageClientAuth))
	// system:masters client certificates are refused at create.
	_, err = csrs.Create(ctx, csrObject("masters", certificatesv1.KubeAPIServerClientSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "root", Organization: []string{"system:masters"}}}).pem, 0,
		certificatesv1.UsageClientAuth), metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden, "*")

	n.mustKubectl("certificate", "approve", "kubelet-client-wrong-cn", "kubelet-serving-email", "kubelet-serving-ok", "custom")
	n.mustKubectl("certificate", "deny", "denied")
	for _, name := range []string{"kubelet-client-wrong-cn", "kubelet-serving-email"} {
		c := waitCSR(t, admin, name, 30*time.Second, "failed", func(c *certificatesv1.CertificateSigningRequest) bool {
			return condition(c, certificatesv1.CertificateFailed) != nil
		})
		if f := condition(c, certificatesv1.CertificateFailed); f.Reason != "SignerValidationFailure" || f.Message == "" || issued(c) {
			t.Errorf("%s: Failed condition %+v, certificate %d bytes; want SignerValidationFailure and none", name, f, len(c.Status.Certificate))
		}
	}
	serving := parseIssued(t, waitCSR(t, admin, "kubelet-serving-ok", 30*time.Second, "issued", issued))
	if serving.Subject.CommonName != "system:node:n1" || len(serving.DNSNames) != 1 || serving.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("kubelet serving certificate: %v %v %v", serving.Subject, serving.DNSNames, serving.ExtKeyUsage)
	}

	// Kubelet client auto-approval: a node may renew its own certificate
	// once it may create certificatesigningrequests/selfnodeclient.
	nodeCSR := func(name string) *certificatesv1.CertificateSigningRequest {
		return csrObject(name, certificatesv1.KubeAPIServerClientKubeletSignerName, makeKeyedCSR(t, &x509.CertificateRequest{Subject: nodeSubject}).pem, 0,
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth)
	}
	node := n.userClientset(t, "system:node:n1", "system:nodes")
	bindClusterRole(t, admin, "nodes-request-csrs", "csr-requester", groupSubject("system:nodes"))
	bindClusterRole(t, admin, "nodes-renew", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", groupSubject("system:nodes"))
	if _, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, nodeCSR("node-renewal"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := waitCSR(t, admin, "node-renewal", 30*time.Second, "auto-approved and issued", issued)
	if a := condition(renewed, certificatesv1.CertificateApproved); a == nil || a.Reason != "AutoApproved" {
		t.Fatalf("node renewal approval %+v, want AutoApproved", a)
	}
	// A kube-apiserver-client request by the same node is never auto-approved.
	if _, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, csrObject("node-other-signer", certificatesv1.KubeAPIServerClientSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: nodeSubject}).pem, 0, certificatesv1.UsageClientAuth), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The approver has seen both requests by the time it approved a later
	// one; neither may carry a condition.
	if _, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, nodeCSR("node-renewal-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCSR(t, admin, "node-renewal-2", 30*time.Second, "auto-approved", func(c *certificatesv1.CertificateSigningRequest) bool {
		return condition(c, certificatesv1.CertificateApproved) != nil
	})
	for _, name := range []string{"node-other-signer", "denied", "custom"} {
		c, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if issued(c) {
			t.Errorf("%s was issued a certificate", name)
		}
		if name == "node-other-signer" && len(c.Status.Conditions) != 0 {
			t.Errorf("a kube-apiserver-client request was auto-approved: %+v", c.Status.Conditions)
		}
	}
}

// TestCSRSigningThroughLeaderKill: on a three-node cluster, the leader is
// killed after a CSR is created and before it is approved and signed; the
// approval goes through a follower, and the new leader's signer issues the
// certificate exactly once (one watch event sets it; it never changes).
func TestCSRSigningThroughLeaderKill(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	cs := f.clientset()
	ctx := context.Background()
	req := makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "survivor", Organization: []string{"team-b"}}})
	created, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx,
		csrObject("survivor", certificatesv1.KubeAPIServerClientSignerName, req.pem, 0, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth),
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{
		ResourceVersion: created.ResourceVersion, FieldSelector: "metadata.name=survivor"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// A bootstrap ClusterRole deleted now is put back by the next leader,
	// which reconciles the bootstrap policy when it takes over.
	if err := cs.RbacV1().ClusterRoles().Delete(ctx, "view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	leader.kill()
	waitFor(t, 60*time.Second, "kubectl certificate approve through a follower after the leader died", func() bool {
		_, err := f.kubectl("certificate", "approve", "survivor")
		return err == nil
	})
	signed := waitCSR(t, cs, "survivor", 60*time.Second, "issued by the new leader", issued)
	if c := parseIssued(t, signed); c.Subject.CommonName != "survivor" {
		t.Fatalf("issued subject %v", c.Subject)
	}
	if condition(signed, certificatesv1.CertificateFailed) != nil {
		t.Fatalf("the CSR also failed: %+v", signed.Status.Conditions)
	}

	// Read the watch up to the issuing event and a little beyond: exactly
	// one event sets the certificate.
	sets := 0
	var first []byte
	deadline := time.After(3 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended early")
			}
			c, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if !ok || !issued(c) {
				continue
			}
			if first == nil {
				first, sets = c.Status.Certificate, 1
			} else if string(c.Status.Certificate) != string(first) {
				sets++
			}
		case <-deadline:
			done = true
		}
	}
	if sets != 1 {
		t.Fatalf("the certificate was set %d times, want exactly once", sets)
	}
	waitFor(t, 30*time.Second, "the new leader to recreate the bootstrap ClusterRole view", func() bool {
		_, err := cs.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
		return err == nil
	})
	for _, n := range followersOf(nodes, leader) {
		c, err := n.clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(c.Status.Certificate) != string(first) {
			t.Fatalf("node %s holds another certificate", n.name)
		}
	}
}

// TestCSRSigningOptions: a separate CA for kube-apiserver-client signs (and
// its certificates authenticate), --cluster-signing-duration caps the
// lifetime, the signer refuses usages outside client auth, and a new
// node's first certificate is auto-approved for a requestor that may
// create certificatesigningrequests/nodeclient.
func TestCSRSigningOptions(t *testing.T) {
	signerDir := t.TempDir()
	signerCA, err := certs.LoadOrCreateCA(signerDir)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t,
		"--cluster-signing-kube-apiserver-client-cert-file", filepath.Join(signerDir, certs.CACertFile),
		"--cluster-signing-kube-apiserver-client-key-file", filepath.Join(signerDir, certs.CAKeyFile),
		"--cluster-signing-duration", "20m")
	ctx := context.Background()
	admin := n.clientset()
	csrs := admin.CertificatesV1().CertificateSigningRequests()

	req := makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "elsewhere", Organization: []string{"team-c"}}})
	if _, err := csrs.Create(ctx, csrObject("separate-ca", certificatesv1.KubeAPIServerClientSignerName, req.pem, 3600,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Server auth is not a kube-apiserver-client usage.
	if _, err := csrs.Create(ctx, csrObject("server-usage", certificatesv1.KubeAPIServerClientSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "srv"}}).pem, 0,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.mustKubectl("certificate", "approve", "separate-ca", "server-usage")
	signed := waitCSR(t, admin, "separate-ca", 30*time.Second, "issued", issued)
	cert := parseIssued(t, signed)
	if err := cert.CheckSignatureFrom(signerCA.Cert); err != nil {
		t.Fatalf("the certificate is not signed by the configured signer CA: %v", err)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life > 20*time.Minute+10*time.Minute || life < 20*time.Minute {
		t.Fatalf("lifetime %v, want the 20m --cluster-signing-duration cap (plus backdating), not the 1h asked for", life)
	}
	client := issuedClient(t, n, signed, req)
	ssr, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a certificate from the separate signer CA does not authenticate: %v", err)
	}
	if ssr.Status.UserInfo.Username != "elsewhere" {
		t.Fatalf("authenticated as %q", ssr.Status.UserInfo.Username)
	}
	failed := waitCSR(t, admin, "server-usage", 30*time.Second, "failed", func(c *certificatesv1.CertificateSigningRequest) bool {
		return condition(c, certificatesv1.CertificateFailed) != nil
	})
	if issued(failed) || condition(failed, certificatesv1.CertificateFailed).Reason != "SignerValidationFailure" {
		t.Fatalf("server-usage: %+v", failed.Status)
	}

	// A bootstrap identity with nodeclient gets the node's first
	// kubelet client certificate approved automatically.
	createClusterRole(t, admin, "csr-creator", rbacv1.PolicyRule{
		Verbs: []string{"create", "get"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}})
	bindClusterRole(t, admin, "bootstrappers-create", "csr-creator", groupSubject("system:bootstrappers"))
	bindClusterRole(t, admin, "bootstrappers-nodeclient", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", groupSubject("system:bootstrappers"))
	boot := n.userClientset(t, "bootstrap-abcdef", "system:bootstrappers")
	if _, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, csrObject("new-node", certificatesv1.KubeAPIServerClientKubeletSignerName,
		makeKeyedCSR(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:n9", Organization: []string{"system:nodes"}}}).pem, 0,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := waitCSR(t, admin, "new-node", 30*time.Second, "auto-approved and issued", issued)
	if a := condition(first, certificatesv1.CertificateApproved); a == nil || a.Reason != "AutoApproved" {
		t.Fatalf("new node approval %+v, want AutoApproved", a)
	}
}
