package main_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1alpha1 "k8s.io/api/certificates/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// csrPEM is a PEM CERTIFICATE REQUEST for cn in orgs with a fresh P-256 key.
func csrPEM(t testing.TB, cn string, orgs ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func newCSR(t testing.TB, name, signer string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	if len(usages) == 0 {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: csrPEM(t, name), SignerName: signer, Usages: usages},
	}
}

// nodeCAPEM is the cluster CA certificate, a valid trust anchor for bundles.
func nodeCAPEM(t testing.TB, n *node) string {
	t.Helper()
	dir := n.caDir
	if dir == "" {
		dir = filepath.Join(n.dir, "pki")
	}
	b, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSignerNameFieldSelector: spec.signerName selects CSRs and
// ClusterTrustBundles on list and watch.
func TestSignerNameFieldSelector(t *testing.T) {
	n := startNode(t, "--runtime-config", "certificates.k8s.io/v1alpha1=true")
	ctx := context.Background()
	cs := n.clientset()
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	for name, signer := range map[string]string{"a1": "example.com/a", "a2": "example.com/a", "b1": "example.com/b"} {
		if _, err := csrs.Create(ctx, newCSR(t, name, signer), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	csrNames := func(sel string) string {
		l, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatalf("list %q: %v", sel, err)
		}
		var out []string
		for _, c := range l.Items {
			out = append(out, c.Name)
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	for sel, want := range map[string]string{
		"spec.signerName=example.com/a":                  "a1,a2",
		"spec.signerName!=example.com/a":                 "b1",
		"spec.signerName=example.com/c":                  "",
		"spec.signerName=example.com/b,metadata.name=b1": "b1",
	} {
		if got := csrNames(sel); got != want {
			t.Errorf("CSRs with %q = %q, want %q", sel, got, want)
		}
	}
	w, err := csrs.Watch(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: "spec.signerName=example.com/b"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*certificatesv1.CertificateSigningRequest).Name != "b1" {
		t.Fatalf("first event %s %v, want ADDED b1", ev.Type, ev.Object)
	}
	for _, name := range []string{"a3", "b2"} {
		if _, err := csrs.Create(ctx, newCSR(t, name, "example.com/"+name[:1]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if ev := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*certificatesv1.CertificateSigningRequest).Name != "b2" {
		t.Fatalf("event %s %v, want ADDED b2 (a3 filtered out)", ev.Type, ev.Object)
	}

	bundles := cs.CertificatesV1alpha1().ClusterTrustBundles()
	ca := nodeCAPEM(t, n)
	for name, signer := range map[string]string{"example.com:a:one": "example.com/a", "example.com:b:one": "example.com/b", "unsigned": ""} {
		b := &certificatesv1alpha1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1alpha1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: ca}}
		if _, err := bundles.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bundle %s: %v", name, err)
		}
	}
	for sel, want := range map[string]string{
		"spec.signerName=example.com/a": "example.com:a:one",
		"spec.signerName=":              "unsigned",
	} {
		l, err := bundles.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatalf("list bundles %q: %v", sel, err)
		}
		var got []string
		for _, b := range l.Items {
			got = append(got, b.Name)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("bundles with %q = %v, want %s", sel, got, want)
		}
	}
	bw, err := bundles.Watch(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: "spec.signerName=example.com/b"})
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Stop()
	if ev := nextEvent(t, bw); ev.Type != watch.Added || ev.Object.(*certificatesv1alpha1.ClusterTrustBundle).Name != "example.com:b:one" {
		t.Fatalf("bundle watch: first event %s %v", ev.Type, ev.Object)
	}
}

// TestClusterTrustBundleVersions: bundles are served only in the versions
// --runtime-config enables.
func TestClusterTrustBundleVersions(t *testing.T) {
	off := startNode(t)
	if _, err := off.clientset().CertificatesV1alpha1().ClusterTrustBundles().List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("v1alpha1 ClusterTrustBundles are served without --runtime-config")
	}
	on := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true")
	cs := on.clientset()
	if _, err := cs.CertificatesV1beta1().ClusterTrustBundles().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("v1beta1 bundles with certificates.k8s.io/v1beta1=true: %v", err)
	}
	if _, err := cs.CertificatesV1alpha1().ClusterTrustBundles().List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("v1alpha1 bundles are served when only v1beta1 is enabled")
	}
}
