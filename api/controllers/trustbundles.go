package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	certificatesv1alpha1 "k8s.io/api/certificates/v1alpha1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	ctbpublisher "k8s.io/kubernetes/pkg/controller/certificates/clustertrustbundlepublisher"
)

// trustBundleControllers are kube-controller-manager's ClusterTrustBundle
// publisher, one per signer of KubeConfig.TrustBundles, all acting as
// kube's kube-apiserver-serving publisher. Each publishes its signer's
// bundle of the term's start under kube's name (the signer name with ':'
// for '/' and a hash of the bundle) and deletes the signer's other
// bundles, so a rotation step, which starts a new term, replaces it.
// None runs while the API serves no ClusterTrustBundle version, as
// kube-controller-manager checks discovery.
func (k *Kube) trustBundleControllers(cl *clients) ([]runnable, error) {
	if k.cfg.TrustBundles == nil {
		return nil, nil
	}
	bundles := k.cfg.TrustBundles()
	if len(bundles) == 0 {
		return nil, nil
	}
	client, err := cl.forIdentity(ControllerIdentity(TrustBundlePublisher), TrustBundlePublisher)
	if err != nil {
		return nil, err
	}
	construct, err := trustBundleVersion(client)
	if err != nil || construct == nil {
		return nil, err
	}
	signers := make([]string, 0, len(bundles))
	for s := range bundles {
		signers = append(signers, s)
	}
	slices.Sort(signers)
	var run []runnable
	for _, signer := range signers {
		ca, err := dynamiccertificates.NewStaticCAContent(signer, bundles[signer])
		if err != nil {
			return nil, fmt.Errorf("the %s trust bundle: %w", signer, err)
		}
		p, err := construct(signer, ca, client)
		if err != nil {
			return nil, fmt.Errorf("the %s trust bundle publisher: %w", signer, err)
		}
		run = append(run, runnable{"clustertrustbundle-publisher-" + strings.ReplaceAll(signer, "/", "-"), func(ctx context.Context) { p.Run(ctx) }})
	}
	return run, nil
}

type publisherConstructor func(string, dynamiccertificates.CAContentProvider, kubernetes.Interface) (ctbpublisher.PublisherRunner, error)

// trustBundleVersion is the publisher of the ClusterTrustBundle version
// the API serves, v1beta1 before v1alpha1; nil when it serves neither.
func trustBundleVersion(client kubernetes.Interface) (publisherConstructor, error) {
	for _, v := range []struct {
		gv        schema.GroupVersion
		construct publisherConstructor
	}{
		{certificatesv1beta1.SchemeGroupVersion, ctbpublisher.NewBetaClusterTrustBundlePublisher},
		{certificatesv1alpha1.SchemeGroupVersion, ctbpublisher.NewAlphaClusterTrustBundlePublisher},
	} {
		res, err := client.Discovery().ServerResourcesForGroupVersion(v.gv.String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discovery of ClusterTrustBundles: %w", err)
		}
		for _, r := range res.APIResources {
			if r.Name == "clustertrustbundles" {
				return v.construct, nil
			}
		}
	}
	return nil, nil
}
