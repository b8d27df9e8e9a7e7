package api

import (
	"net/http"
	goruntime "runtime"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/discovery"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/api/registry"
)

// Version is what /version reports: the Kubernetes API level served.
var Version = version.Info{
	Major: "1", Minor: "33", GitVersion: "v1.33.13+trustplane",
	GitTreeState: "clean", GoVersion: goruntime.Version(), Compiler: goruntime.Compiler,
	Platform: goruntime.GOOS + "/" + goruntime.GOARCH,
}

// versionBody is /version: kube's version.Info, the API level kubectl and
// client-go read (and decode into version.Info, ignoring the rest), and
// beside it trustplane's release, commit and formats, so that an operator
// sees what a node runs and which formats it writes. kube-apiserver shows
// its build (gitCommit, buildDate) here to anyone too.
type versionBody struct {
	version.Info
	Trustplane releaseInfo `json:"trustplane"`
}

type releaseInfo struct {
	Release string              `json:"release"`
	Commit  string              `json:"commit,omitempty"`
	Formats []trustplane.Format `json:"formats"`
}

func (s *Server) serveVersion(w http.ResponseWriter, req *http.Request) {
	responsewriters.WriteRawJSON(http.StatusOK, versionBody{Info: Version,
		Trustplane: releaseInfo{Release: trustplane.Release(), Commit: trustplane.Commit(), Formats: trustplane.Formats()}}, w)
}

var unversioned = schema.GroupVersion{Version: "v1"}

func (s *Server) writeDiscovery(w http.ResponseWriter, req *http.Request, obj runtime.Object) {
	responsewriters.WriteObjectNegotiated(registry.Codecs, discoveryRestrictions{}, unversioned, w, req, http.StatusOK, obj, false)
}

func (s *Server) serveAPIVersions(w http.ResponseWriter, req *http.Request) {
	s.discovery.core.ServeHTTP(w, req)
}

func (s *Server) serveAPIGroupList(w http.ResponseWriter, req *http.Request) {
	s.discovery.groups.ServeHTTP(w, req)
}

func (s *Server) legacyAPIVersions(w http.ResponseWriter, req *http.Request) {
	s.writeDiscovery(w, req, &metav1.APIVersions{
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: s.cfg.Listen},
		},
	})
}

// groups returns the named groups served, each with its versions.
func (s *Server) groups() []metav1.APIGroup {
	byName := map[string]*metav1.APIGroup{}
	var names []string
	var gvs []schema.GroupVersion
	for _, st := range s.reg.Stores() {
		gvs = append(gvs, st.GVR.GroupVersion())
	}
	for _, v := range s.reg.Virtuals() {
		gvs = append(gvs, v.GVR.GroupVersion())
	}
	for _, gv := range gvs {
		if gv.Group == "" {
			continue
		}
		g, ok := byName[gv.Group]
		if !ok {
			g = &metav1.APIGroup{Name: gv.Group}
			byName[gv.Group] = g
			names = append(names, gv.Group)
		}
		seen := false
		for _, v := range g.Versions {
			seen = seen || v.Version == gv.Version
		}
		if !seen {
			vd := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
			g.Versions = append(g.Versions, vd)
			if len(g.Versions) == 1 {
				g.PreferredVersion = vd
			}
		}
	}
	sort.Strings(names)
	out := make([]metav1.APIGroup, 0, len(names))
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out
}

func (s *Server) legacyAPIGroupList(w http.ResponseWriter, req *http.Request) {
	s.writeDiscovery(w, req, &metav1.APIGroupList{Groups: s.groups()})
}

// serveDiscovery answers /api/v1, /apis/<group> and /apis/<group>/<version>.
func (s *Server) serveDiscovery(w http.ResponseWriter, req *http.Request, info *genericapirequest.RequestInfo) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "api":
		// /api/ (kube's go-restful root route) and /apis/ (kube's
		// aggregator registers it beside /apis) are the version and group
		// lists too.
		s.serveAPIVersions(w, req)
		return
	case len(parts) == 1 && parts[0] == "apis":
		s.serveAPIGroupList(w, req)
		return
	case len(parts) == 2 && parts[0] == "api" && parts[1] == "v1":
		s.serveResourceList(w, req, schema.GroupVersion{Version: "v1"})
		return
	case len(parts) == 2 && parts[0] == "apis":
		for _, g := range s.groups() {
			if g.Name == parts[1] {
				s.writeDiscovery(w, req, &g)
				return
			}
		}
	case len(parts) == 3 && parts[0] == "apis":
		s.serveResourceList(w, req, schema.GroupVersion{Group: parts[1], Version: parts[2]})
		return
	}
	if parts[0] == "api" {
		// Under /api, the core group's web service answers (a Status).
		s.notFound(w, req)
		return
	}
	pageNotFound(w, req)
}

func (s *Server) serveResourceList(w http.ResponseWriter, req *http.Request, gv schema.GroupVersion) {
	list := &metav1.APIResourceList{GroupVersion: gv.String(), APIResources: s.apiResources(gv)}
	if len(list.APIResources) == 0 {
		if !s.servesGroup(gv.Group) {
			pageNotFound(w, req)
			return
		}
		s.notFound(w, req)
		return
	}
	s.writeDiscovery(w, req, list)
}

// apiResources lists the resources and subresources served in gv, as its
// discovery document names them.
func (s *Server) apiResources(gv schema.GroupVersion) []metav1.APIResource {
	list := &metav1.APIResourceList{APIResources: []metav1.APIResource{}}
	for _, st := range s.reg.Stores() {
		if st.GVR.GroupVersion() != gv {
			continue
		}
		// The storage version hash is kube's, of the group, version and
		// kind the objects are stored in, so that a storage version
		// migrator sees when that changes (a definition's storage version).
		stored := st.Stored()
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: st.GVR.Resource, SingularName: st.Singular, Namespaced: st.Namespaced,
			Kind: st.KindName, Verbs: st.Verbs(), ShortNames: st.ShortNames, Categories: st.Categories,
			StorageVersionHash: discovery.StorageVersionHash(stored.Group, stored.Version, st.KindName),
		})
		subs := make([]string, 0, len(st.Subresources))
		for sub := range st.Subresources {
			subs = append(subs, sub)
		}
		sort.Strings(subs)
		for _, sub := range subs {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: st.GVR.Resource + "/" + sub, Namespaced: st.Namespaced, Kind: st.KindName, Verbs: st.VerbsOf(sub),
			})
		}
		if st.Custom != nil && st.Custom.Scale != nil {
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: st.GVR.Resource + "/scale", Namespaced: st.Namespaced, Group: "autoscaling", Version: "v1", Kind: "Scale",
				Verbs: []string{"get", "patch", "update"},
			})
		}
	}
	for _, v := range s.reg.Virtuals() {
		if v.GVR.GroupVersion() != gv {
			continue
		}
		r := metav1.APIResource{Name: v.DiscoveryName(), SingularName: v.Singular, Namespaced: v.Namespaced, Kind: v.KindName, Verbs: []string{"create"}}
		if v.RequestGV != nil {
			r.Group, r.Version = v.RequestGV.Group, v.RequestGV.Version
		}
		list.APIResources = append(list.APIResources, r)
	}
	return list.APIResources
}
