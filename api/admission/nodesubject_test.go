package admission

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	certificatesapi "k8s.io/kubernetes/pkg/apis/certificates"

	"github.com/trustplane/trustplane/certs"
)

func TestNodeSubjectRestriction(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM := func(cn string, orgs ...string) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	tests := []struct {
		name      string
		request   []byte
		signer    string
		forbidden bool
	}{
		{"an ordinary subject passes", csrPEM("alice", "dev"), "kubernetes.io/kube-apiserver-client", false},
		{"the node organisation is refused", csrPEM("alice", certs.NodeOrganization), "kubernetes.io/kube-apiserver-client", true},
		{"a node common name is refused", csrPEM(certs.NodeUserPrefix + "n1"), "kubernetes.io/kube-apiserver-client", true},
		{"a custom signer is no exception", csrPEM(certs.NodeUserPrefix+"n1", certs.NodeOrganization), "example.com/custom", true},
		{"a kubelet signer is no exception", csrPEM("system:node:a", "system:nodes", certs.NodeOrganization), "kubernetes.io/kube-apiserver-client-kubelet", true},
		{"an unparsable request is left to validation (422)", []byte("not pem"), "kubernetes.io/kube-apiserver-client", false},
	}
	p := NewNodeSubjectRestriction()
	gvr := certificatesapi.Resource("certificatesigningrequests").WithVersion("v1")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr := &certificatesapi.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec:       certificatesapi.CertificateSigningRequestSpec{Request: tt.request, SignerName: tt.signer},
			}
			attrs := admission.NewAttributesRecord(csr, nil, certificatesapi.Kind("CertificateSigningRequest").WithVersion("v1"),
				"", "x", gvr, "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "eve"})
			err := p.Validate(context.Background(), attrs, nil)
			if tt.forbidden != apierrors.IsForbidden(err) || (!tt.forbidden && err != nil) {
				t.Fatalf("Validate = %v, want forbidden=%v", err, tt.forbidden)
			}
		})
	}
}
