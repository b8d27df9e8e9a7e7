package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	"k8s.io/apiextensions-apiserver/pkg/controller/apiapproval"
	"k8s.io/apiextensions-apiserver/pkg/controller/establish"
	"k8s.io/apiextensions-apiserver/pkg/controller/finalizer"
	"k8s.io/apiextensions-apiserver/pkg/controller/nonstructuralschema"
	"k8s.io/apiextensions-apiserver/pkg/controller/status"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// The CustomResourceDefinition condition controllers, by the names
// kube-apiserver's apiextensions server gives their queues.
const (
	CRDNamingController              = "crd-naming-condition-controller"
	CRDNonStructuralSchemaController = "crd-nonstructuralschema-condition-controller"
	CRDAPIApprovalController         = "crd-kubernetes-api-approval-policy-conformant-condition-controller"
	CRDFinalizerController           = "crd-finalizer"
	CRDEstablishingController        = "crdEstablishing"
)

// queueEstablishing queues obj, a definition, for Established once its
// names are accepted.
func queueEstablishing(c *establish.EstablishingController, obj any, delay time.Duration) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) || !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
		return
	}
	c.QueueCRD(crd.Name, delay)
}

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
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("apiextensions controllers: %w", err)
	}
	cleanup := finalizer.NewCRDFinalizer(crds, client.ApiextensionsV1(), customObjects{dyn: dyn})
	establishing := establish.NewEstablishingController(crds, client.ApiextensionsV1())
	// kube's apiextensions server queues a definition whose names are
	// accepted for Established, after 5 s when it runs beside other
	// servers, so that they serve it first.
	if _, err := crds.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { queueEstablishing(establishing, obj, k.cfg.EstablishDelay) },
		UpdateFunc: func(_, obj any) { queueEstablishing(establishing, obj, k.cfg.EstablishDelay) },
	}); err != nil {
		return nil, nil, fmt.Errorf("apiextensions controllers: %w", err)
	}
	return []runnable{
		{CRDNamingController, func(ctx context.Context) { naming.Run(ctx.Done()) }},
		{CRDNonStructuralSchemaController, func(ctx context.Context) { nonStructural.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDAPIApprovalController, func(ctx context.Context) { approval.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDFinalizerController, func(ctx context.Context) { cleanup.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDEstablishingController, func(ctx context.Context) { establishing.Run(ctx.Done()) }},
		// The factory starts once every controller took its informer.
		{"apiextensions-informers", func(ctx context.Context) { factory.Start(ctx.Done()) }},
	}, factory.Shutdown, nil
}

// customObjects is the finalizer's access to a definition's objects:
// the API itself, through the controllers' dynamic client, in the storage
// version (or the first served one), so that what it deletes passes the
// API's own deletion rules (finalizers, admission), as kube's finalizer
// deletes through the definition's REST storage.
type customObjects struct {
	dyn dynamic.Interface
}

// errNotServed: a definition serves no version to delete objects through.
var errNotServed = errors.New("no version of the custom resource is served")

func (c customObjects) GetCustomResourceListerCollectionDeleter(crd *apiextensionsv1.CustomResourceDefinition) (finalizer.ListerCollectionDeleter, error) {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (version == "" || v.Storage) {
			version = v.Name
		}
	}
	if version == "" || crd.Status.AcceptedNames.Plural == "" {
		return nil, fmt.Errorf("%s: %w", crd.Name, errNotServed)
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Status.AcceptedNames.Plural}
	return &customObjectClient{res: c.dyn.Resource(gvr)}, nil
}

// customObjectClient lists and deletes one custom resource's objects.
type customObjectClient struct {
	res dynamic.NamespaceableResourceInterface
}

func (c *customObjectClient) NewList() runtime.Object { return &unstructured.UnstructuredList{} }

func (c *customObjectClient) List(ctx context.Context, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	return c.res.List(ctx, metav1.ListOptions{})
}

func (c *customObjectClient) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, errors.New("custom objects: no table here")
}

// DeleteCollection deletes the objects of the context's namespace (all of
// a cluster-scoped resource's).
func (c *customObjectClient) DeleteCollection(ctx context.Context, _ rest.ValidateObjectFunc, _ *metav1.DeleteOptions, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	var res dynamic.ResourceInterface = c.res
	if ns, ok := genericapirequest.NamespaceFrom(ctx); ok && ns != "" {
		res = c.res.Namespace(ns)
	}
	return nil, res.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}
