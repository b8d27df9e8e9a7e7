package api

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	endpointsmetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/internal/connlimit"
)

// Metrics. GET /metrics serves, in Prometheus' formats, kube's process-wide
// registry (component-base's legacyregistry: the process and Go
// collectors, and every kube metric registered in it) together with this
// node's own collectors (Config.Collectors: raft's; and the watch cache's,
// below). RBAC decides who reads it, as in kube: system:monitoring (the
// bootstrap policy's role of that name) and cluster-admin. Like the raft
// status it is never forwarded: every node reports its own figures.
//
// The request metrics are kube's own (k8s.io/apiserver/pkg/endpoints/
// metrics), with kube's names and labels, recorded as kube records them:
//
//   - apiserver_request_total and apiserver_request_duration_seconds (and
//     apiserver_response_sizes for GET and LIST), once per API request, on
//     the node that serves the client, by withRequestMetrics. A write a
//     follower forwards is recorded by the follower only (the leader
//     skips requests a node forwarded to it). As kube instruments only the
//     routes it installed, only served resources, versions and
//     subresources are recorded: a path no route serves, and every
//     non-resource path, adds no series (kube's healthz records the three
//     health roots itself). Custom resources are recorded under their
//     group, version and resource while their definition serves them
//     (metricRoute), as kube's apiextensions server records them. Requests
//     refused before the filter (401, 403) are not recorded, as in kube.
//   - apiserver_longrunning_requests: watches, while they run.
//   - apiserver_requested_deprecated_apis: requests to a deprecated
//     version (kube's rule, deprecation.IsDeprecated of the version's Go
//     type).
//   - apiserver_current_inflight_requests: kube's max-in-flight filter
//     (limits.go) keeps it, once its watermark upkeep runs (Serve).
//   - Refusals: kube's max-in-flight filter records its 429s itself
//     (apiserver_request_total{code="429"} and
//     apiserver_request_terminations_total), with the resource labels of
//     served routes only (withInFlightLimit); a watch refused by the watch
//     cap is recorded the same way here. There is no priority and fairness,
//     so no apiserver_flowcontrol_* figures.
//
// apiserver_storage_objects is kube's gauge too, fed from the node's fsm
// when scraped, with a series per resource the node stores
// (objectCounter), and apiserver_registered_watchers is kube's former
// gauge (registeredWatchers).
const metricsPath = "/metrics"

// registeredWatchers is apiserver_registered_watchers as kube-apiserver
// defined it (group, version, kind) until it dropped it; k8s.io/apiserver
// v0.33 has none, and its figure lives on in
// apiserver_longrunning_requests{verb="WATCH"}. Issue 15 asks for it by
// name, so it is kept: the watches being served, by kind.
var registeredWatchers = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
	Subsystem:      "apiserver",
	Name:           "registered_watchers",
	Help:           "Number of currently registered watchers for a given resources",
	StabilityLevel: compbasemetrics.ALPHA,
}, []string{"group", "version", "kind"})

var registerMetricsOnce sync.Once

// registerMetrics registers kube's request metrics in kube's
// process-wide registry. Until then kube's metrics are no-ops, so a
// process that builds no Server pays nothing for them.
func registerMetrics() {
	registerMetricsOnce.Do(func() {
		endpointsmetrics.Register()
		legacyregistry.MustRegister(registeredWatchers)
	})
}

// newMetricsHandler builds the /metrics handler: kube's registry and a
// registry of this server's own collectors, gathered together.
func (s *Server) newMetricsHandler() (http.Handler, error) {
	registerMetrics()
	own := prometheus.NewRegistry()
	s.objects = &objectCounter{st: s.reg.Storage()}
	cs := append([]prometheus.Collector{watchCacheCollector{s.reg.Storage()}, s.objects}, s.cfg.Collectors...)
	if s.pending != nil {
		cs = append(cs, connlimit.Collector(func() []*connlimit.Limiter { return []*connlimit.Limiter{s.pending} }))
	}
	for _, c := range cs {
		if err := own.Register(c); err != nil {
			return nil, fmt.Errorf("api: register a metrics collector: %w", err)
		}
	}
	// kube's HandlerFor, as legacyregistry.Handler uses it, over both.
	return compbasemetrics.HandlerFor(prometheus.Gatherers{legacyregistry.DefaultGatherer, own}, compbasemetrics.HandlerOpts{}), nil
}

// serveMetrics serves GET /metrics, after counting the stored objects if
// the last count is old.
func (s *Server) serveMetrics(w http.ResponseWriter, req *http.Request) {
	s.objects.refresh(time.Now())
	s.metrics.ServeHTTP(w, req)
}

// startMetrics starts what keeps metrics that are not kept per request:
// kube's watermark upkeep behind apiserver_current_inflight_requests,
// which ends when the server stops. It runs only when max in flight is on.
func (s *Server) startMetrics() {
	if s.cfg.MaxRequestsInFlight > 0 || s.cfg.MaxMutatingRequestsInFlight > 0 {
		genericfilters.StartMaxInFlightWatermarkMaintenance(s.stopping)
	}
}

// metricRoute is what the request metrics need of a served route beyond
// its RequestInfo: what kube's installer fixes per route.
type metricRoute struct {
	kind           string // apiserver_registered_watchers' label
	deprecated     bool
	removedRelease string
}

// routeKey names a served route: group, version, resource, subresource.
type routeKey struct{ group, version, resource, subresource string }

// metricRoutes lists every served route, stored and virtual resources and
// their subresources. Only these are recorded: the group, version,
// resource and subresource of a request are the client's to choose, and
// recording any path would let a client add series without end.
func metricRoutes(reg *registry.Registry) map[routeKey]metricRoute {
	major, minor, err := deprecation.MajorMinor(Version)
	if err != nil {
		major, minor = 0, 0 // deprecation then needs no version (kube's rule)
	}
	lifecycle := func(gvk schema.GroupVersionKind) metricRoute {
		r := metricRoute{kind: gvk.Kind}
		if obj, err := registry.Scheme.New(gvk); err == nil && deprecation.IsDeprecated(obj, major, minor) {
			r.deprecated, r.removedRelease = true, deprecation.RemovedRelease(obj)
		}
		return r
	}
	routes := map[routeKey]metricRoute{}
	for _, st := range reg.Stores() {
		gvr := st.GVR
		r := lifecycle(gvr.GroupVersion().WithKind(st.KindName))
		routes[routeKey{gvr.Group, gvr.Version, gvr.Resource, ""}] = r
		for sub := range st.Subresources {
			routes[routeKey{gvr.Group, gvr.Version, gvr.Resource, sub}] = r
		}
	}
	for _, v := range reg.Virtuals() {
		routes[routeKey{v.GVR.Group, v.GVR.Version, v.GVR.Resource, v.Subresource}] = lifecycle(v.Kind())
	}
	return routes
}

// metricRoute is the route info's request is recorded under, and whether
// the node serves it: a built-in route (the table New builds), or a route
// of a custom resource the node serves now, as kube's apiextensions
// server instruments the resources, status and scale subresources of the
// definitions it serves. Custom routes come and go with their
// definitions, so they are looked up per request in the registry, which
// holds only served versions; only those, never a path a client makes up,
// label a series.
func (s *Server) metricRoute(info *genericapirequest.RequestInfo) (metricRoute, bool) {
	if r, ok := s.routes[routeKey{info.APIGroup, info.APIVersion, info.Resource, info.Subresource}]; ok {
		return r, true
	}
	st := s.reg.Store(schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource})
	if st == nil || st.Custom == nil {
		return metricRoute{}, false
	}
	if sub := info.Subresource; sub != "" && st.Subresources[sub] == nil && !customScale(st, sub) {
		return metricRoute{}, false
	}
	// kube's apiextensions server reports no removed release for custom
	// versions.
	return metricRoute{kind: st.KindName}, true
}

// withRequestMetrics records each API request this node serves to its
// client, once, with kube's MonitorRequest, and keeps watches in kube's
// long-running gauge and in apiserver_registered_watchers. It sits after
// authorisation and before the watch cap and the timeout: the refusals of
// max in flight, which runs earlier, are recorded by kube's filter, and a
// timeout's 504 is seen as the client sees it.
//
// Per request it adds no allocation of its own: the response code and
// size come from the trackingWriter withRecovery already wraps every
// response in, and the labels are strings the RequestInfo and the route
// table already hold. What MonitorRequest allocates is kube's.
func (s *Server) withRequestMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := genericapirequest.RequestInfoFrom(req.Context())
		if !ok || !info.IsResourceRequest {
			next.ServeHTTP(w, req)
			return
		}
		route, ok := s.metricRoute(info)
		if !ok || s.forwardedHere(req) {
			next.ServeHTTP(w, req)
			return
		}
		rw, ok := w.(*trackingWriter)
		if !ok {
			// Only outside the full chain (tests calling a filter alone).
			rw = &trackingWriter{ResponseWriter: w}
			w = rw
		}
		start := time.Now()
		finished := false
		defer func() {
			code := rw.status
			if code == 0 {
				// Nothing written: net/http answers 200 when the handler
				// returns, withRecovery 500 when it panicked.
				code = http.StatusOK
				if !finished {
					code = http.StatusInternalServerError
				}
			}
			recordRequest(req, info, route, code, int(rw.size), time.Since(start))
		}()
		if info.Verb == "watch" {
			serveWatchMetered(w, req, info, route, next)
		} else {
			next.ServeHTTP(w, req)
		}
		finished = true
	})
}

// forwardedHere says whether req is a write another node forwarded to this
// one; that node recorded it, as the one its client talks to. Only node
// certificates may forward, so a client cannot hide its requests with the
// header.
func (s *Server) forwardedHere(req *http.Request) bool {
	return req.Header.Get(headerForwardedBy) != "" && s.fromNode(req)
}

// serveWatchMetered serves a watch counted as long-running, as kube's
// watch handler does (RecordLongRunning), and in
// apiserver_registered_watchers.
func serveWatchMetered(w http.ResponseWriter, req *http.Request, info *genericapirequest.RequestInfo, route metricRoute, next http.Handler) {
	g := registeredWatchers.WithLabelValues(info.APIGroup, info.APIVersion, route.kind)
	g.Inc()
	defer g.Dec()
	endpointsmetrics.RecordLongRunning(req, info, endpointsmetrics.APIServerComponent, func() { next.ServeHTTP(w, req) })
}

// recordRequest records one request in kube's request metrics.
func recordRequest(req *http.Request, info *genericapirequest.RequestInfo, route metricRoute, code, size int, elapsed time.Duration) {
	if code == http.StatusTooManyRequests && info.Verb == "watch" {
		// Refused by the watch cap (limits.go): record it as kube's
		// max-in-flight filter, which runs before this one and records
		// its own refusals, records them.
		endpointsmetrics.RecordRequestTermination(req, info, endpointsmetrics.APIServerComponent, code)
	}
	endpointsmetrics.MonitorRequest(req, installerVerb(info.Verb), info.APIGroup, info.APIVersion, info.Resource, info.Subresource,
		endpointsmetrics.CleanScope(info), endpointsmetrics.APIServerComponent, route.deprecated, route.removedRelease, code, size, elapsed)
}

// installerVerb is the verb kube's installer hands MonitorRequest for a
// RequestInfo verb. MonitorRequest reports the HTTP method (GET as LIST
// for collections, PATCH as APPLY for server-side apply, WATCH for
// watches); this verb only tells it which requests are reads, whose
// response sizes it records.
func installerVerb(verb string) string {
	switch verb {
	case "get":
		return "GET"
	case "list":
		return "LIST"
	case "watch":
		return "WATCH"
	case "create":
		return "POST"
	case "update":
		return "PUT"
	case "patch":
		return "PATCH"
	case "delete":
		return "DELETE"
	case "deletecollection":
		return "DELETECOLLECTION"
	}
	return ""
}

// objectCountPeriod is the least time between two counts of the stored
// objects. kube's registry counts every resource every minute in the
// background (generic registry startObservingCount); here a scrape counts
// when the last count is older, so an idle node spends nothing and a
// scraper polling fast costs one pass over the store per period.
const objectCountPeriod = 30 * time.Second

// descStorageObjects is kube's apiserver_storage_objects (k8s.io/apiserver
// storage/etcd3/metrics), name, help and label as kube serves them. It is
// this server's own collector (objectCounter) instead of kube's global
// gauge, which can set a resource's series but never remove it.
var descStorageObjects = prometheus.NewDesc("apiserver_storage_objects",
	"[STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.",
	[]string{"resource"}, nil)

// objectCounter reports apiserver_storage_objects from the node's fsm
// (storage.ObjectCounts): the live objects per resource at the time of the
// last count, labelled as kube labels them (group resource, "configmaps",
// "certificatesigningrequests.certificates.k8s.io").
//
// A resource has a series exactly while the storage layer has a store for
// it (storage.Resources): when a custom resource definition is deleted or
// stops serving a resource, the store is forgotten and the series goes at
// the next scrape, so deleted definitions leave no series behind. A change
// in the set of resources also counts again at once, so a new resource is
// reported from its first scrape.
type objectCounter struct {
	st *storage.Storage

	mu     sync.Mutex // one count at a time
	last   time.Time  // zero: never counted
	counts map[schema.GroupResource]int64
}

// refresh counts the objects if the last count is older than
// objectCountPeriod at now, or was of another set of resources.
func (c *objectCounter) refresh(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.last.IsZero() && now.Sub(c.last) < objectCountPeriod && c.sameResources() {
		return
	}
	counts := c.st.ObjectCounts()
	if counts == nil {
		return
	}
	c.last, c.counts = now, counts
}

// sameResources says whether the last count covers exactly the resources
// the storage layer has stores for now. c.mu is held.
func (c *objectCounter) sameResources() bool {
	now := c.st.Resources()
	if len(now) != len(c.counts) {
		return false
	}
	for _, gr := range now {
		if _, ok := c.counts[gr]; !ok {
			return false
		}
	}
	return true
}

// Describe implements prometheus.Collector.
func (c *objectCounter) Describe(ch chan<- *prometheus.Desc) { ch <- descStorageObjects }

// Collect implements prometheus.Collector: the last count of each resource
// that still has a store.
func (c *objectCounter) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gr := range c.st.Resources() {
		if n, ok := c.counts[gr]; ok {
			ch <- prometheus.MustNewConstMetric(descStorageObjects, prometheus.GaugeValue, float64(n), gr.String())
		}
	}
}

// watchCacheCollector reports the node's watch cache when scraped
// (watchcache.Stats). kube's cacher keeps one window per resource and
// reports apiserver_watch_cache_* and apiserver_terminated_watchers_total
// per resource; trustplane's node has one window for every resource, so
// its figures have names of their own, and the help text names kube's
// counterpart where there is one.
type watchCacheCollector struct{ st *storage.Storage }

var (
	descWatchEvents = prometheus.NewDesc("trustplane_watch_cache_events",
		"Events held in this node's watch cache window.", nil, nil)
	descWatchBytes = prometheus.NewDesc("trustplane_watch_cache_bytes",
		"Bytes of the events held in this node's watch cache window.", nil, nil)
	descWatchOldest = prometheus.NewDesc("trustplane_watch_cache_oldest_resource_version",
		"The window holds every change after this resourceVersion; a watch from an older one gets 410 Gone.", nil, nil)
	descWatchRV = prometheus.NewDesc("trustplane_watch_cache_resource_version",
		"The applied index the watch cache has seen (apiserver_watch_cache_resource_version).", nil, nil)
	descWatchReceived = prometheus.NewDesc("trustplane_watch_cache_events_received_total",
		"Events the watch cache received from the applied stream; its rate is the events per second (apiserver_watch_cache_events_received_total).", nil, nil)
	descWatchers = prometheus.NewDesc("trustplane_watch_cache_watchers",
		"Watchers registered in this node's watch cache.", nil, nil)
	descWatchersCut = prometheus.NewDesc("trustplane_watch_cache_terminated_watchers_total",
		"Watchers cut off for falling too far behind; each client resumes from its last resourceVersion (apiserver_terminated_watchers_total).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c watchCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWatchEvents, descWatchBytes, descWatchOldest, descWatchRV,
		descWatchReceived, descWatchers, descWatchersCut} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A node that serves no watches
// reports nothing.
func (c watchCacheCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.st.WatchCacheStats()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(descWatchEvents, float64(st.Events))
	gauge(descWatchBytes, float64(st.Bytes))
	gauge(descWatchOldest, float64(st.Oldest))
	gauge(descWatchRV, float64(st.Progress))
	ch <- prometheus.MustNewConstMetric(descWatchReceived, prometheus.CounterValue, float64(st.Appended))
	gauge(descWatchers, float64(st.Watchers))
	ch <- prometheus.MustNewConstMetric(descWatchersCut, prometheus.CounterValue, float64(st.SlowWatchers))
}
