package api

import (
	"fmt"
	"net/http"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
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
// document lists.
type customDiscovery struct {
	mu  sync.Mutex
	gvs map[schema.GroupVersion]bool
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
		named:  named, custom: &customDiscovery{gvs: map[schema.GroupVersion]bool{}},
	}, nil
}

// customGroupPriority is what kube's apiextensions server gives the groups
// of custom resources in aggregated discovery, after the built-in ones.
const customGroupPriority = 1000

// CustomResourcesChanged brings the aggregated discovery document and the
// OpenAPI documents up to date with the custom resources served: call it
// after every change of them (the legacy discovery documents are computed
// per request).
func (s *Server) CustomResourcesChanged() {
	d := s.discovery
	d.custom.mu.Lock()
	defer d.custom.mu.Unlock()
	now := map[schema.GroupVersion]bool{}
	var order []schema.GroupVersion
	for _, st := range s.reg.Stores() {
		if gv := st.GVR.GroupVersion(); st.Custom != nil && !now[gv] {
			now[gv] = true
			order = append(order, gv)
		}
	}
	for gv := range d.custom.gvs {
		if !now[gv] {
			d.named.RemoveGroupVersion(metav1.GroupVersion{Group: gv.Group, Version: gv.Version})
		}
	}
	for i, gv := range order {
		// A resource list endpoints cannot convert is left out, as kube
		// logs and skips it.
		_ = s.addAggregated(d.named, gv, customGroupPriority, len(order)-i)
	}
	d.custom.gvs = now
	// The OpenAPI documents follow (a definition kube cannot describe is
	// left out of them, as kube's OpenAPI controller logs and skips it).
	_ = s.openapi.withCustom(s.reg.Stores())
	_ = s.openapiV2.withCustom(s.reg.Stores())
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
