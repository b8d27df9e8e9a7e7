package controllers

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	"k8s.io/apiextensions-apiserver/pkg/controller/apiapproval"
	"k8s.io/apiextensions-apiserver/pkg/controller/finalizer"
	"k8s.io/apiextensions-apiserver/pkg/controller/nonstructuralschema"
	"k8s.io/apiextensions-apiserver/pkg/controller/status"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The CustomResourceDefinition condition controllers, by the names
// kube-apiserver's apiextensions server gives their queues.
const (
	CRDNamingController              = "crd-naming-condition-controller"
	CRDNonStructuralSchemaController = "crd-nonstructuralschema-condition-controller"
	CRDAPIApprovalController         = "crd-kubernetes-api-approval-policy-conformant-condition-controller"
	CRDFinalizerController           = "crd-finalizer"
)

// crdConditionWorkers is what kube-apiserver runs each of them with.
const crdConditionWorkers = 5

// apiextensionsControllers are the controllers kube-apiserver's
// apiextensions server runs over CustomResourceDefinitions, built as it
// builds them, on an informer factory of their own: NamesAccepted (and
// status.acceptedNames) from the naming controller, NonStructuralSchema,
// KubernetesAPIApprovalPolicyConformant for definitions in protected
// groups, and the finalizer that ends a definition's deletion (its
// objects first, for a definition that was Established; see
// noCustomObjects). They act as kube's apiextensions server does, with
// the API server's own identity (system:apiserver, in system:masters).
// shutdown waits for the factory's informers; call it once the term's
// connections are closed, as Run does for its own factories.
func (k *Kube) apiextensionsControllers(cl *clients, logger logr.Logger) (run []runnable, shutdown func(), err error) {
	cfg, err := cl.configFor(Identity{User: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}, "apiextensions")
	if err != nil {
		return nil, nil, err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("apiextensions controllers: %w", err)
	}
	factory := apiextensionsinformers.NewSharedInformerFactoryWithOptions(client, 0)
	crds := factory.Apiextensions().V1().CustomResourceDefinitions()
	naming := status.NewNamingConditionController(logger.WithName(CRDNamingController), crds, client.ApiextensionsV1())
	nonStructural := nonstructuralschema.NewConditionController(crds, client.ApiextensionsV1())
	approval := apiapproval.NewKubernetesAPIApprovalPolicyConformantConditionController(crds, client.ApiextensionsV1())
	cleanup := finalizer.NewCRDFinalizer(crds, client.ApiextensionsV1(), noCustomObjects{})
	return []runnable{
		{CRDNamingController, func(ctx context.Context) { naming.Run(ctx.Done()) }},
		{CRDNonStructuralSchemaController, func(ctx context.Context) { nonStructural.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDAPIApprovalController, func(ctx context.Context) { approval.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDFinalizerController, func(ctx context.Context) { cleanup.Run(crdConditionWorkers, ctx.Done()) }},
		// The factory starts once every controller took its informer.
		{"apiextensions-informers", func(ctx context.Context) { factory.Start(ctx.Done()) }},
	}, factory.Shutdown, nil
}

// noCustomObjects is the finalizer's access to a definition's objects.
// No definition is served yet, so none is ever Established and the
// finalizer, which deletes the objects of Established definitions only,
// never asks: it removes the finalizer at once (reason NeverEstablished).
type noCustomObjects struct{}

// errNotServed says that no custom objects are served to delete.
var errNotServed = errors.New("custom resources are not served")

func (noCustomObjects) GetCustomResourceListerCollectionDeleter(crd *apiextensionsv1.CustomResourceDefinition) (finalizer.ListerCollectionDeleter, error) {
	return nil, fmt.Errorf("%s: %w", crd.Name, errNotServed)
}
