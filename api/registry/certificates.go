package registry

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/apis/certificates"
	csrregistry "k8s.io/kubernetes/pkg/registry/certificates/certificates"
	ctbregistry "k8s.io/kubernetes/pkg/registry/certificates/clustertrustbundle"
)

// CertificatesGroup is the group of CertificateSigningRequests and
// ClusterTrustBundles.
const CertificatesGroup = certificates.GroupName

// CertificateResources returns certificates.k8s.io's resources:
// CertificateSigningRequests (v1) always, and ClusterTrustBundles in each
// of bundleVersions (v1alpha1, v1beta1) that --runtime-config enables.
// Strategies, printers and selectable fields are kube's own.
func CertificateResources(bundleVersions ...string) []*Resource {
	out := []*Resource{{
		GVR:      schema.GroupVersionResource{Group: CertificatesGroup, Version: "v1", Resource: "certificatesigningrequests"},
		KindName: "CertificateSigningRequest", Singular: "certificatesigningrequest", ShortNames: []string{"csr"},
		NewFunc:     func() runtime.Object { return &certificates.CertificateSigningRequest{} },
		NewListFunc: func() runtime.Object { return &certificates.CertificateSigningRequestList{} },
		// The spec is immutable; conditions change through approval (only
		// Approved and Denied) and status (the rest and the certificate).
		CreateStrategy: csrregistry.Strategy, UpdateStrategy: csrregistry.Strategy, DeleteStrategy: csrregistry.Strategy,
		Subresources: map[string]rest.RESTUpdateStrategy{
			"status":   issuedOnlyWhenApproved{csrregistry.StatusStrategy},
			"approval": csrregistry.ApprovalStrategy,
		},
		GetAttrs:       csrregistry.GetAttrs,
		TableConvertor: coreTable,
	}}
	for _, v := range bundleVersions {
		out = append(out, &Resource{
			GVR:      schema.GroupVersionResource{Group: CertificatesGroup, Version: v, Resource: "clustertrustbundles"},
			KindName: "ClusterTrustBundle", Singular: "clustertrustbundle",
			NewFunc:        func() runtime.Object { return &certificates.ClusterTrustBundle{} },
			NewListFunc:    func() runtime.Object { return &certificates.ClusterTrustBundleList{} },
			CreateStrategy: ctbregistry.Strategy, UpdateStrategy: ctbregistry.Strategy, DeleteStrategy: ctbregistry.Strategy,
			GetAttrs:       bundleAttrs,
			TableConvertor: coreTable,
		})
	}
	return out
}

// bundleAttrs are a ClusterTrustBundle's selectable fields, as kube's
// storage declares them: object metadata and spec.signerName.
func bundleAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	b, ok := obj.(*certificates.ClusterTrustBundle)
	if !ok {
		return nil, nil, fmt.Errorf("not a clustertrustbundle")
	}
	return labels.Set(b.Labels), generic.MergeFieldsSets(generic.ObjectMetaFieldsSet(&b.ObjectMeta, false),
		fields.Set{"spec.signerName": b.Spec.SignerName}), nil
}

// issuedOnlyWhenApproved is kube's CSR status strategy plus the state rule
// of the specification that kube leaves to signers: status.certificate may
// only be set on a request that is Approved and has not Failed.
type issuedOnlyWhenApproved struct {
	rest.RESTUpdateStrategy
}

func (s issuedOnlyWhenApproved) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	errs := s.RESTUpdateStrategy.ValidateUpdate(ctx, obj, old)
	csr, prev := obj.(*certificates.CertificateSigningRequest), old.(*certificates.CertificateSigningRequest)
	if len(csr.Status.Certificate) == 0 || bytes.Equal(csr.Status.Certificate, prev.Status.Certificate) {
		return errs
	}
	approved, failed := false, false
	for _, c := range csr.Status.Conditions {
		approved = approved || c.Type == certificates.CertificateApproved
		failed = failed || c.Type == certificates.CertificateFailed
	}
	if !approved || failed {
		errs = append(errs, field.Forbidden(field.NewPath("status", "certificate"),
			"may only be set on a request with an Approved condition and no Failed condition"))
	}
	return errs
}
