package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	apiextensionsinformersv1 "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/apiapproval"
	"k8s.io/apiextensions-apiserver/pkg/controller/establish"
	"k8s.io/apiextensions-apiserver/pkg/controller/finalizer"
	"k8s.io/apiextensions-apiserver/pkg/controller/nonstructuralschema"
	"k8s.io/apiextensions-apiserver/pkg/controller/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The CustomResourceDefinition condition controllers, by the names
// kube-apiserver's apiextensions server gives their queues.
const (
	CRDNamingController              = "crd-naming-condition-controller"
	CRDNonStructuralSchemaController = "crd-nonstructuralschema-condition-controller"
	CRDAPIApprovalController         = "crd-kubernetes-api-approval-policy-conformant-condition-controller"
	CRDFinalizerController           = "crd-finalizer"
	CRDEstablishingController        = "crdEstablishing"
	// CRDRefusedController is trustplane's own: it sets the Refused
	// condition of the definitions the node will not serve.
	CRDRefusedController = "crd-refused-condition-controller"
)

// queueEstablishing queues obj, a definition, for Established once its
// names are accepted, unless the node refuses to serve it.
func queueEstablishing(c *establish.EstablishingController, obj any, delay time.Duration, custom CustomResources) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) || !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) ||
		custom.DefinitionRefusal(crd) != nil {
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
	cleanup := finalizer.NewCRDFinalizer(crds, client.ApiextensionsV1(), k.cfg.CustomResources)
	establishing := establish.NewEstablishingController(crds, client.ApiextensionsV1())
	// kube's apiextensions server queues a definition whose names are
	// accepted for Established, after 5 s when it runs beside other
	// servers, so that they serve it first.
	if _, err := crds.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { queueEstablishing(establishing, obj, k.cfg.EstablishDelay, k.cfg.CustomResources) },
		UpdateFunc: func(_, obj any) { queueEstablishing(establishing, obj, k.cfg.EstablishDelay, k.cfg.CustomResources) },
	}); err != nil {
		return nil, nil, fmt.Errorf("apiextensions controllers: %w", err)
	}
	refused, err := newRefusedController(crds, client.ApiextensionsV1(), k.cfg.CustomResources)
	if err != nil {
		return nil, nil, fmt.Errorf("apiextensions controllers: %w", err)
	}
	return []runnable{
		{CRDNamingController, func(ctx context.Context) { naming.Run(ctx.Done()) }},
		{CRDNonStructuralSchemaController, func(ctx context.Context) { nonStructural.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDAPIApprovalController, func(ctx context.Context) { approval.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDFinalizerController, func(ctx context.Context) { cleanup.Run(crdConditionWorkers, ctx.Done()) }},
		{CRDEstablishingController, func(ctx context.Context) { establishing.Run(ctx.Done()) }},
		{CRDRefusedController, refused.run},
		// The factory starts once every controller took its informer.
		{"apiextensions-informers", func(ctx context.Context) { factory.Start(ctx.Done()) }},
	}, factory.Shutdown, nil
}

// CustomResources is what the apiextensions controllers need of the
// node's registry (api/registry.Registry).
type CustomResources interface {
	// GetCustomResourceListerCollectionDeleter is the finalizer's access
	// to a definition's objects: its own store, found by its UID.
	finalizer.CRClientGetter
	// DefinitionRefusal says why the node refuses to serve a stored
	// definition (nil: it does not).
	DefinitionRefusal(crd *apiextensionsv1.CustomResourceDefinition) error
}

// refusedController keeps the Refused condition of every definition: True,
// with the reason as its message, on a stored definition the node refuses
// to serve (api/registry DefinitionRefusal: a reserved group, a built-in
// resource, a conversion webhook by Service), absent otherwise. Such definitions are
// left from before the rules; new ones are refused at create.
type refusedController struct {
	lister interface {
		Get(name string) (*apiextensionsv1.CustomResourceDefinition, error)
	}
	client apiextensionsv1client.CustomResourceDefinitionsGetter
	custom CustomResources
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
}

func newRefusedController(crds apiextensionsinformersv1.CustomResourceDefinitionInformer, client apiextensionsv1client.CustomResourceDefinitionsGetter, custom CustomResources) (*refusedController, error) {
	c := &refusedController{lister: crds.Lister(), client: client, custom: custom, synced: crds.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: CRDRefusedController})}
	enqueue := func(obj any) {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			c.queue.Add(crd.Name)
		}
	}
	_, err := crds.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	return c, err
}

func (c *refusedController) run(ctx context.Context) {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
}

func (c *refusedController) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	if err := c.sync(ctx, name); err != nil {
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

func (c *refusedController) sync(ctx context.Context, name string) error {
	cached, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	want := refusedCondition(c.custom.DefinitionRefusal(cached))
	have := apihelpers.FindCRDCondition(cached, refusedType)
	switch {
	case want == nil && have == nil:
		return nil
	case want != nil && have != nil && have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message:
		return nil
	}
	crd := cached.DeepCopy()
	if want == nil {
		apihelpers.RemoveCRDCondition(crd, refusedType)
	} else {
		apihelpers.SetCRDCondition(crd, *want)
	}
	_, err = c.client.CustomResourceDefinitions().UpdateStatus(ctx, crd, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the informer brings the newer definition
	}
	return err
}

// refusedType is the Refused condition (api/registry RefusedCondition;
// this package names it itself so as not to import the registry).
const refusedType apiextensionsv1.CustomResourceDefinitionConditionType = "Refused"

// refusedCondition is the condition a refusal calls for; nil for none.
func refusedCondition(refusal error) *apiextensionsv1.CustomResourceDefinitionCondition {
	if refusal == nil {
		return nil
	}
	return &apiextensionsv1.CustomResourceDefinitionCondition{
		Type: refusedType, Status: apiextensionsv1.ConditionTrue, Reason: "RefusedDefinition",
		Message: "this server does not serve the definition: " + refusal.Error(),
	}
}
