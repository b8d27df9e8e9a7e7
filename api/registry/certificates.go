package registry

import (
	"fmt"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
			"status":   csrregistry.StatusStrategy,
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
