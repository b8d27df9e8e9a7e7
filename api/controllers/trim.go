package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
)

// trimCached drops from the controllers' informer caches what none of the
// controllers run here reads, so that a node storing many objects does not
// hold a second full copy of each for its controllers (kube-controller-
// manager holds one; here they share the process with the API, whose
// storage layer already holds every object decoded). It is the informer
// factories' transform: it runs once on each object a list or watch
// decodes, before the object is cached or handed to a handler, and changes
// it in place; applying it twice changes nothing more.
//
// What each controller reads, and so what stays:
//   - managedFields: none reads them, and an update whose object carries
//     none keeps the stored ones (kube's field manager takes the live
//     object's), so the controllers that update an object from their cache
//     (the root CA publisher, the CSR controllers) write the same.
//   - ConfigMaps: the root CA publisher reads data and annotations of
//     kube-root-ca.crt only; the garbage collector reads metadata.
//   - Secrets: the tokens controller reads data and annotations of
//     ServiceAccount token Secrets only; the garbage collector reads
//     metadata.
//   - ServiceAccounts: the ServiceAccount and tokens controllers read name,
//     namespace, uid and secrets; none reads annotations.
//
// Labels, owner references, finalizers and every other kind stay whole.
func trimCached(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		if o.Name != rootcacertpublisher.RootCACertConfigMapName {
			o.Data, o.BinaryData, o.Annotations = nil, nil, nil
		}
	case *corev1.Secret:
		if o.Type != corev1.SecretTypeServiceAccountToken {
			o.Data, o.StringData, o.Annotations = nil, nil, nil
		}
	case *corev1.ServiceAccount:
		o.Annotations = nil
	}
	return obj, nil
}
