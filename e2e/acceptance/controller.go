package acceptance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
)

// IdentityRequests is the custom resource the controller serves.
var IdentityRequests = schema.GroupVersionResource{Group: "acceptance.example.com", Version: "v1", Resource: "identityrequests"}

// CRD defines IdentityRequests: spec.serviceAccount (required),
// spec.audiences and spec.expirationSeconds (at least 600, as
// TokenRequest wants), and a status subresource the controller writes.
const CRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: identityrequests.acceptance.example.com
spec:
  group: acceptance.example.com
  scope: Namespaced
  names: {plural: identityrequests, singular: identityrequest, kind: IdentityRequest, shortNames: [idr]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Account, type: string, jsonPath: .spec.serviceAccount}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [serviceAccount]
            properties:
              serviceAccount: {type: string, minLength: 1, maxLength: 63}
              audiences: {type: array, items: {type: string}}
              expirationSeconds: {type: integer, minimum: 600, default: 3600}
            x-kubernetes-validations:
            - rule: "self.serviceAccount == oldSelf.serviceAccount"
              message: "serviceAccount is immutable"
          status:
            type: object
            properties:
              phase: {type: string}
              serviceAccountUID: {type: string}
              username: {type: string}
              tokenExpiration: {type: string}
              observedGeneration: {type: integer}
`

// Config is one controller process.
type Config struct {
	// REST reaches the API (one node of a cluster).
	REST *rest.Config
	// Identity is this process's name in the Lease.
	Identity string
	// Namespace holds the Lease and the requests served.
	Namespace string
	// LeaseName, LeaseDuration, RenewDeadline and RetryPeriod are
	// client-go's leader election settings.
	LeaseName                                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Out receives one line per event worth a test's notice:
	// "LEADING <id>", "ISSUED <namespace>/<name>".
	Out io.Writer
}

// controller is the reconciling side, run while this process leads.
type controller struct {
	cfg      Config
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	lister   cache.GenericLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder events.EventRecorder
}

// Run campaigns for the Lease until ctx ends, and reconciles while it
// holds it. It returns when ctx ends or the Lease is lost.
func Run(ctx context.Context, cfg Config) error {
	kube, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg.REST)
	if err != nil {
		return err
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		LeaseDuration: cfg.LeaseDuration,
		RenewDeadline: cfg.RenewDeadline,
		RetryPeriod:   cfg.RetryPeriod,
		// A holder that cannot renew stops reconciling at once.
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Fprintln(cfg.Out, "LEADING", cfg.Identity)
				lead(ctx, cfg, kube, dyn)
			},
			OnStoppedLeading: func() { fmt.Fprintln(cfg.Out, "STOPPED", cfg.Identity) },
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	return ctx.Err()
}

// lead runs the informer, the queue and two workers until ctx ends.
func lead(ctx context.Context, cfg Config, kube kubernetes.Interface, dyn dynamic.Interface) {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	informer := factory.ForResource(IdentityRequests)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	c := &controller{
		cfg: cfg, kube: kube, dyn: dyn, lister: informer.Lister(),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		recorder: broadcaster.NewRecorder(scheme.Scheme, "acceptance-controller"),
	}
	defer c.queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		return
	}
	for i := 0; i < 2; i++ {
		go c.work(ctx)
	}
	<-ctx.Done()
}

func (c *controller) work(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.reconcile(ctx, key)
		switch {
		case err == nil:
			c.queue.Forget(key)
		case ctx.Err() == nil:
			c.queue.AddRateLimited(key)
		}
		c.queue.Done(key)
	}
}

// errNotIssued: the token was issued but did not authenticate as the
// ServiceAccount.
var errNotIssued = errors.New("acceptance: the issued token does not authenticate as its ServiceAccount")

// reconcile brings one request to Issued.
func (c *controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	obj, err := c.lister.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // deleted: what it owns goes with it (garbage collection)
	}
	if err != nil {
		return err
	}
	req := obj.(*unstructured.Unstructured)
	phase, _, _ := unstructured.NestedString(req.Object, "status", "phase")
	observed, _, _ := unstructured.NestedInt64(req.Object, "status", "observedGeneration")
	if phase == "Issued" && observed == req.GetGeneration() {
		return nil
	}
	account, _, _ := unstructured.NestedString(req.Object, "spec", "serviceAccount")
	audiences, _, _ := unstructured.NestedStringSlice(req.Object, "spec", "audiences")
	expiration, _, _ := unstructured.NestedInt64(req.Object, "spec", "expirationSeconds")

	sa, err := c.serviceAccount(ctx, req, account)
	if err != nil {
		return err
	}
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &expiration},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", ns, account, err)
	}
	review, err := c.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("review of %s/%s's token: %w", ns, account, err)
	}
	want := "system:serviceaccount:" + ns + ":" + account
	if !review.Status.Authenticated || review.Status.User.Username != want {
		c.recorder.Eventf(req, nil, corev1.EventTypeWarning, "ReviewFailed", "Issue", "the token for %s did not authenticate: %s", account, review.Status.Error)
		return errNotIssued
	}

	out := req.DeepCopy()
	status := map[string]interface{}{
		"phase": "Issued", "serviceAccountUID": string(sa.UID), "username": review.Status.User.Username,
		"tokenExpiration": tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339), "observedGeneration": req.GetGeneration(),
	}
	if err := unstructured.SetNestedMap(out.Object, status, "status"); err != nil {
		return err
	}
	if _, err := c.dyn.Resource(IdentityRequests).Namespace(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of %s: %w", key, err)
	}
	c.recorder.Eventf(req, nil, corev1.EventTypeNormal, "Issued", "Issue", "issued a token for %s, valid until %s", want, status["tokenExpiration"])
	fmt.Fprintln(c.cfg.Out, "ISSUED", key)
	return nil
}

// serviceAccount returns the request's ServiceAccount, creating it owned
// by the request, so that deleting the request deletes it.
func (c *controller) serviceAccount(ctx context.Context, req *unstructured.Unstructured, name string) (*corev1.ServiceAccount, error) {
	sas := c.kube.CoreV1().ServiceAccounts(req.GetNamespace())
	sa, err := sas.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return sa, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	yes := true
	sa, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: IdentityRequests.GroupVersion().String(), Kind: "IdentityRequest",
			Name: req.GetName(), UID: req.GetUID(), Controller: &yes, BlockOwnerDeletion: &yes,
		}},
	}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return sas.Get(ctx, name, metav1.GetOptions{})
	}
	return sa, err
}
