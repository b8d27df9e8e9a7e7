package chaos

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// clientCred is a client certificate and its key, in PEM.
type clientCred struct{ cert, key []byte }

// clusterCAProbe checks, around a rotation of the cluster CA, what its
// clients see: a client that keeps the admin certificate of the old CA
// (oldCred) authenticates on every node until finish, and on none after
// it; a kubelet-like client that renewed its certificate through a CSR
// after promote authenticates on every node, before and after finish.
type clusterCAProbe struct {
	n       *nemesis
	oldCred clientCred
	oldCAs  []byte // the CAs the old kubeconfig trusts
	renewed *clientCred
}

func newClusterCAProbe(n *nemesis, via string) (*clusterCAProbe, error) {
	cfg, err := n.t.Config(via)
	if err != nil {
		return nil, err
	}
	return &clusterCAProbe{n: n, oldCred: clientCred{cfg.CertData, cfg.KeyData}, oldCAs: cfg.CAData}, nil
}

// clientWith is a client of node name with cred, which does not verify
// the server: what is probed is whether the server accepts cred.
func (p *clusterCAProbe) clientWith(name string, cred clientCred) (*kubernetes.Clientset, error) {
	cfg, err := p.n.t.Config(name)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(&rest.Config{
		Host: cfg.Host, Timeout: 10 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true, CertData: cred.cert, KeyData: cred.key},
	})
}

// expect checks cred on every node: accepted (want) or refused with 401.
// A node that cannot answer is not held against the credential.
func (p *clusterCAProbe) expect(ctx context.Context, what string, cred clientCred, want bool) error {
	var bad []string
	for _, name := range p.n.t.Names() {
		cs, err := p.clientWith(name, cred)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = cs.CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{})
		cancel()
		switch {
		case want && err != nil && apierrors.IsUnauthorized(err):
			bad = append(bad, name+" refused it")
		case !want && err == nil:
			bad = append(bad, name+" accepted it")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("cluster-ca: %s: %s", what, strings.Join(bad, ", "))
	}
	return nil
}

// renew is the kubelet-like client: it asks for a kube-apiserver-client
// certificate through a CSR, approves it, and waits until it is issued.
func (p *clusterCAProbe) renew(ctx context.Context, via string) error {
	cfg, err := followConfig(p.n.t, via)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("chaos-renew-%d", time.Now().UnixNano())
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name, Organization: []string{"chaos"}}}, key)
	if err != nil {
		return err
	}
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	deadline := time.Now().Add(stepTimeout)
	for {
		c, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certificatesv1.KubeAPIServerClientSignerName,
				Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			c, err = csrs.Get(ctx, name, metav1.GetOptions{})
		}
		if err == nil && len(c.Status.Conditions) == 0 {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
				Reason: "ChaosRenewal", Message: "a kubelet-like renewal during a cluster CA rotation", LastUpdateTime: metav1.Now(),
			}}
			_, err = csrs.UpdateApproval(ctx, name, c, metav1.UpdateOptions{})
		}
		if err == nil && len(c.Status.Certificate) > 0 {
			keyDER, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return err
			}
			p.renewed = &clientCred{c.Status.Certificate, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster-ca: the renewal CSR %s was not issued within %s (last error: %v)", name, stepTimeout, err)
		}
		time.Sleep(time.Second)
	}
}

// promoted runs after promote: the old CA's client still authenticates
// everywhere, and a renewal through a CSR (signed by the new CA) gives a
// certificate every node accepts. It then waits until the clients that
// follow their kubeconfig (the workload's) have picked up the new
// bundle, which each node writes as it applies promote, before finish
// may drop the old CA. Nil p: not the cluster CA.
func (p *clusterCAProbe) promoted(ctx context.Context, via string) error {
	if p == nil {
		return nil
	}
	if err := p.expect(ctx, "the old CA's certificate after promote", p.oldCred, true); err != nil {
		return err
	}
	if err := p.renew(ctx, via); err != nil {
		return err
	}
	if err := p.expect(ctx, "a certificate renewed after promote", *p.renewed, true); err != nil {
		return err
	}
	p.n.wait(ctx, 4*followInterval+2*time.Second)
	return nil
}

// after runs once the rotation ended: after a whole rotation the old
// CA's certificate is refused on every node and the renewed one still
// accepted; after an abort the old CA is the active one and its
// certificate accepted.
func (p *clusterCAProbe) after(ctx context.Context, plan string) error {
	if p == nil {
		return nil
	}
	if plan != "rotate" {
		return p.expect(ctx, "the old CA's certificate after "+plan, p.oldCred, true)
	}
	// Every node drops the old CA within a second of applying finish.
	p.n.wait(ctx, 2*time.Second)
	if err := p.expect(ctx, "the old CA's certificate after finish", p.oldCred, false); err != nil {
		return err
	}
	if err := p.expect(ctx, "a certificate renewed after promote, after finish", *p.renewed, true); err != nil {
		return err
	}
	return p.servesNewCA()
}

// servesNewCA checks that every node serves a chain its kubeconfig's CAs
// verify and the old CAs do not.
func (p *clusterCAProbe) servesNewCA() error {
	old := x509.NewCertPool()
	old.AppendCertsFromPEM(p.oldCAs)
	for _, name := range p.n.t.Names() {
		cfg, err := p.n.t.Config(name)
		if err != nil {
			return err
		}
		cur := x509.NewCertPool()
		cur.AppendCertsFromPEM(cfg.CAData)
		u, err := url.Parse(cfg.Host)
		if err != nil {
			return err
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", u.Host, &tls.Config{
			InsecureSkipVerify: true, // verified below, against each pool
			MinVersion:         tls.VersionTLS12,
		})
		if err != nil {
			continue // a node that does not answer says nothing of its certificate
		}
		chain := conn.ConnectionState().PeerCertificates
		conn.Close()
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		verify := func(roots *x509.CertPool) error {
			_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: u.Hostname()})
			return err
		}
		if err := verify(cur); err != nil {
			return fmt.Errorf("cluster-ca: after finish %s serves a chain its kubeconfig's CAs do not verify: %w", name, err)
		}
		if verify(old) == nil {
			return fmt.Errorf("cluster-ca: after finish %s serves a chain the old CA still verifies", name)
		}
	}
	return nil
}
