package api

import (
	"fmt"
	"net/http"
	"slices"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/trustplane/trustplane/api/registry"
)

// discoveryHandlers serve /api and /apis: the aggregated discovery document
// (apidiscovery.k8s.io/v2 APIGroupDiscoveryList, every group, version and
// resource in one response) when the client asks for it, as kubectl and
// client-go do first, and the legacy APIVersions and APIGroupList
// otherwise. kube's own ResourceManager builds, caches and ETags the
// aggregated documents; they are built once, from the same resource lists
// as the legacy documents, since what a node serves is fixed at its start
// (--runtime-config).
type discoveryHandlers struct {
	core, groups http.Handler
	// named is the /apis document's manager, to which custom resources'
	// group versions come and go (CustomResourcesChanged).
	named  aggregated.ResourceManager
	custom *customDiscovery
}

// customDiscovery are the group versions of custom resources the /apis
// document lists, each with what it was listed from.
type customDiscovery struct {
	mu  sync.Mutex
	gvs map[schema.GroupVersion]customGV
}

// customGV is what a custom group version was listed from: the stores
// serving it (a definition served anew has new stores) and its version
// priority.
type customGV struct {
	stores   []*registry.Store
	priority int
}

func (s *Server) newDiscoveryHandlers() (discoveryHandlers, error) {
	core := aggregated.NewResourceManager("api")
	if err := s.addAggregated(core, schema.GroupVersion{Version: "v1"}, 1, 1); err != nil {
		return discoveryHandlers{}, err
	}
	named := aggregated.NewResourceManager("apis")
	groups := s.groups()
	for i, g := range groups {
		for j, v := range g.Versions {
			// Priorities keep the legacy list's order: groups by name,
			// each group's preferred version first.
			gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
			if err := s.addAggregated(named, gv, len(groups)-i, len(g.Versions)-j); err != nil {
				return discoveryHandlers{}, err
			}
		}
	}
	return discoveryHandlers{
		core:   aggregated.WrapAggregatedDiscoveryToHandler(http.HandlerFunc(s.legacyAPIVersions), core),
		groups: aggregated.WrapAggregatedDiscoveryToHandler(http.HandlerFunc(s.legacyAPIGroupList), named),
		named:  named, custom: &customDiscovery{gvs: map[schema.GroupVersion]customGV{}},
	}, nil
}

// customGroupPriority is what kube's apiextensions server gives the groups
// of custom resources in aggregated discovery, after the built-in ones.
const customGroupPriority = 1000

// CustomResourcesChanged brings the aggregated discovery document and the
// OpenAPI documents up to date with the custom resources served: call it
// after every change of them (the legacy discovery documents are computed
// per request). It redoes only the group versions whose stores changed,
// and the documents are merged when next read, so that a change costs
// what the changed definition's group versions hold, not what every
// definition does (kube's apiextensions controllers work per definition
// too).
func (s *Server) CustomResourcesChanged() {
	stores := s.reg.Stores()
	s.refreshCustomDiscovery(stores)
	// The OpenAPI documents follow (a definition kube cannot describe is
	// left out of them, as kube's OpenAPI controller skips it).
	s.openapi.withCustom(stores)
	s.openapiV2.withCustom(stores)
}

// refreshCustomDiscovery lists the custom group versions of stores in the
// aggregated /apis document: a group version whose stores changed is
// listed anew, one no longer served is removed, and every other one keeps
// its entry. Version priorities follow the stores' order, as the legacy
// document's version order does.
func (s *Server) refreshCustomDiscovery(stores []*registry.Store) {
	d := s.discovery
	d.custom.mu.Lock()
	defer d.custom.mu.Unlock()
	byGV, order := customStoresByGV(stores)
	for gv := range d.custom.gvs {
		if _, ok := byGV[gv]; !ok {
			d.named.RemoveGroupVersion(metav1.GroupVersion{Group: gv.Group, Version: gv.Version})
		}
	}
	now := make(map[schema.GroupVersion]customGV, len(order))
	for i, gv := range order {
		want := customGV{stores: byGV[gv], priority: len(order) - i}
		have, listed := d.custom.gvs[gv]
		switch {
		case !listed || !slices.Equal(have.stores, want.stores):
			if err := s.addAggregated(d.named, gv, customGroupPriority, want.priority); err != nil {
				// A resource list endpoints cannot convert is left
				// out, as kube logs and skips it; it is tried again
				// on the next change.
				want.stores = nil
			}
		case have.priority != want.priority:
			d.named.SetGroupVersionPriority(metav1.GroupVersion{Group: gv.Group, Version: gv.Version}, customGroupPriority, want.priority)
		}
		now[gv] = want
	}
	d.custom.gvs = now
}

// customStoresByGV are the custom stores by group version, and the group
// versions in the order of their first store.
func customStoresByGV(stores []*registry.Store) (map[schema.GroupVersion][]*registry.Store, []schema.GroupVersion) {
	byGV := map[schema.GroupVersion][]*registry.Store{}
	var order []schema.GroupVersion
	for _, st := range stores {
		if st.Custom == nil {
			continue
		}
		gv := st.GVR.GroupVersion()
		if byGV[gv] == nil {
			order = append(order, gv)
		}
		byGV[gv] = append(byGV[gv], st)
	}
	return byGV, order
}

func (s *Server) addAggregated(rm aggregated.ResourceManager, gv schema.GroupVersion, groupPriority, versionPriority int) error {
	resources, err := endpoints.ConvertGroupVersionIntoToDiscovery(s.apiResources(gv))
	if err != nil {
		return fmt.Errorf("aggregated discovery of %v: %w", gv, err)
	}
	rm.AddGroupVersion(gv.Group, apidiscoveryv2.APIVersionDiscovery{
		Version: gv.Version, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
	})
	rm.SetGroupVersionPriority(metav1.GroupVersion{Group: gv.Group, Version: gv.Version}, groupPriority, versionPriority)
	return nil
}
