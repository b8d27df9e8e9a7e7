package admission

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/admission"
	certificatesapi "k8s.io/kubernetes/pkg/apis/certificates"

	"github.com/trustplane/trustplane/certs"
)

// NodeSubjectRestriction refuses every CertificateSigningRequest, for any
// signer, whose subject claims a trustplane node identity: the node
// organisation, or a common name under the node prefix. Node certificates
// come only from the node CA, which no signer uses; this plugin makes sure
// no signer's certificate even looks like one, so a mistake elsewhere (a
// signer configured with the wrong CA, a check that reads only the
// subject) cannot turn an approved CSR into a cluster peer. It works like
// kube's CertificateSubjectRestriction, which refuses system:masters, and
// answers with the same Forbidden wording.
type NodeSubjectRestriction struct {
	*admission.Handler
}

var _ admission.ValidationInterface = (*NodeSubjectRestriction)(nil)

// NewNodeSubjectRestriction handles creates only: a CSR's spec is
// immutable, so an update cannot introduce a node subject.
func NewNodeSubjectRestriction() *NodeSubjectRestriction {
	return &NodeSubjectRestriction{Handler: admission.NewHandler(admission.Create)}
}

var csrResource = certificatesapi.Resource("certificatesigningrequests")

// Validate refuses a CSR whose parsed subject is a node's.
func (p *NodeSubjectRestriction) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != csrResource || a.GetSubresource() != "" {
		return nil
	}
	csr, ok := a.GetObject().(*certificatesapi.CertificateSigningRequest)
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("expected type CertificateSigningRequest, got: %T", a.GetObject()))
	}
	parsed, err := certificatesapi.ParseCSR(csr.Spec.Request)
	if err != nil {
		// Not a CSR at all: validation, which runs next, answers 422 with
		// kube's message. Nothing unparsable can be signed.
		return nil
	}
	if certs.IsNodeSubject(parsed.Subject.CommonName, parsed.Subject.Organization) {
		return admission.NewForbidden(a, fmt.Errorf("use of %s signer with a trustplane node identity (organization %q or common name prefix %q) is not allowed",
			csr.Spec.SignerName, certs.NodeOrganization, certs.NodeUserPrefix))
	}
	return nil
}
