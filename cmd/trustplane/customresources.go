package main

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/registry"
)

// customResources serves, on this node, the custom resources of every
// CustomResourceDefinition it has applied, as kube's apiextensions server
// does on each kube-apiserver: an informer over the node's own API (its
// list and watch are local, so the node follows its own applied stream)
// adds, replaces and removes the definitions' stores in the served
// registry, and the aggregated discovery follows. A definition is served
// once its names are accepted (or it is Established), and is served anew
// when its spec, accepted names or terminating state change.
type customResources struct {
	log *slog.Logger
	reg *registry.Registry
	srv *api.Server

	mu sync.Mutex
	// served is what each served definition was built from.
	served map[types.UID]servedDefinition
	// waiting are the definitions not served because an older one's names
	// conflict with theirs (registry.ErrNameConflict), by UID, as last
	// seen: they are tried again whenever the served set changes.
	waiting map[types.UID]*apiextensionsv1.CustomResourceDefinition
	// seen is the last version of each served definition, to put back in
	// waiting when an older one evicts it.
	seen map[types.UID]*apiextensionsv1.CustomResourceDefinition
}

// servedDefinition is what the stores of a definition depend on.
type servedDefinition struct {
	spec        apiextensionsv1.CustomResourceDefinitionSpec
	names       apiextensionsv1.CustomResourceDefinitionNames
	terminating bool
}

func newCustomResources(log *slog.Logger, reg *registry.Registry, srv *api.Server) *customResources {
	return &customResources{log: log, reg: reg, srv: srv, served: map[types.UID]servedDefinition{},
		waiting: map[types.UID]*apiextensionsv1.CustomResourceDefinition{}, seen: map[types.UID]*apiextensionsv1.CustomResourceDefinition{}}
}

// start runs the informer over cfg (the node's loopback client) until
// ctx ends.
func (c *customResources) start(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := apiextensionsinformers.NewSharedInformerFactory(client, 0)
	informer := factory.Apiextensions().V1().CustomResourceDefinitions().Informer()
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.sync(obj) },
		UpdateFunc: func(_, obj any) { c.sync(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
				c.remove(crd.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	go factory.Start(ctx.Done())
	return nil
}

// servable says whether kube's apiextensions server serves crd's objects.
func servable(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) ||
		apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established)
}

func (c *customResources) sync(obj any) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.syncLocked(crd) {
		c.retryWaiting()
	}
}

// syncLocked serves crd as it now is, or stops serving it, and reports
// whether the served set changed. c.mu is held.
func (c *customResources) syncLocked(crd *apiextensionsv1.CustomResourceDefinition) bool {
	delete(c.waiting, crd.UID)
	if !servable(crd) {
		return c.removeLocked(crd.UID)
	}
	want := servedDefinition{spec: crd.Spec, names: crd.Status.AcceptedNames, terminating: apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating)}
	if have, ok := c.served[crd.UID]; ok && reflect.DeepEqual(have, want) {
		c.seen[crd.UID] = crd
		return false // a condition changed, not what the stores are built from
	}
	resources, err := c.resources(crd)
	var evicted []types.UID
	if err == nil {
		evicted, err = c.reg.ServeCustom(crd.UID, resources)
	}
	for _, uid := range evicted {
		if prev := c.seen[uid]; prev != nil {
			c.log.Info("custom resources: an older definition's names conflict; not serving", "crd", prev.Name, "older", crd.Name)
			c.waiting[uid] = prev
		}
		delete(c.served, uid)
		delete(c.seen, uid)
	}
	if err != nil {
		// The definition's conditions say why (a schema that is not
		// structural, names not accepted); it is served once they clear.
		// One whose names an older definition holds waits for it to go.
		level := slog.LevelWarn
		if errors.Is(err, registry.ErrNotServable) {
			level = slog.LevelInfo
		}
		if errors.Is(err, registry.ErrNameConflict) {
			c.waiting[crd.UID] = crd
		}
		c.log.Log(context.Background(), level, "custom resources: not serving a definition", "crd", crd.Name, "error", err)
		_, _ = c.reg.ServeCustom(crd.UID, nil) // serving nothing cannot fail
		_, was := c.served[crd.UID]
		delete(c.served, crd.UID)
		delete(c.seen, crd.UID)
		c.srv.CustomResourcesChanged()
		return was || len(evicted) > 0
	}
	c.served[crd.UID] = want
	c.seen[crd.UID] = crd
	c.srv.CustomResourcesChanged()
	c.log.Info("custom resources: serving", "crd", crd.Name, "versions", len(resources))
	return true
}

// retryWaiting tries the waiting definitions again after the served set
// changed, until a round serves none of them. c.mu is held.
func (c *customResources) retryWaiting() {
	for round := 0; round <= len(c.waiting); round++ {
		changed := false
		for _, crd := range c.waiting {
			if c.syncLocked(crd) {
				changed = true
			}
		}
		if !changed {
			return
		}
	}
}

// resources builds the stores of crd's served versions, unless the node
// refuses to serve it (registry.DefinitionRefusal: a reserved group, a
// built-in resource, a conversion webhook by Service; its Refused condition says so).
func (c *customResources) resources(crd *apiextensionsv1.CustomResourceDefinition) ([]*registry.Resource, error) {
	if err := c.reg.DefinitionRefusal(crd); err != nil {
		return nil, err
	}
	static, err := api.CustomResourceSchemas()
	if err != nil {
		c.log.Warn("custom resources: no OpenAPI schemas for apply; apply deduces types", "error", err)
		static = nil
	}
	return registry.CustomResources(crd, static)
}

func (c *customResources) remove(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, uid)
	if c.removeLocked(uid) {
		c.retryWaiting()
	}
}

// removeLocked stops serving the definition uid; it reports whether it
// was served. c.mu is held.
func (c *customResources) removeLocked(uid types.UID) bool {
	if _, ok := c.served[uid]; !ok {
		return false
	}
	_, _ = c.reg.ServeCustom(uid, nil)
	delete(c.served, uid)
	delete(c.seen, uid)
	c.srv.CustomResourcesChanged()
	return true
}
