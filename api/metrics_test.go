package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// metricsClient serves requests through a server's whole filter chain as a
// client-certificate user in groups, and reads its /metrics.
type metricsClient struct {
	t *testing.T
	s *Server
}

func (c metricsClient) do(method, target, contentType, body string, groups ...string) *httptest.ResponseRecorder {
	c.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "metrics-test", Organization: groups}}
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	rec := httptest.NewRecorder()
	c.s.Handler().ServeHTTP(rec, req)
	return rec
}

// scrape reads /metrics as system:masters and parses it with Prometheus'
// text parser.
func (c metricsClient) scrape() map[string]*dto.MetricFamily {
	c.t.Helper()
	rec := c.do(http.MethodGet, metricsPath, "", "", user.SystemPrivilegedGroup)
	if rec.Code != http.StatusOK {
		c.t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		c.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample is the value of the series of family name whose labels include
// want: a counter's or gauge's value, a histogram's sample count. found is
// false when no series matches.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, found bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, val := range want {
			if have[k] != val {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
		found = true
	}
	return v, found
}

// TestRequestMetrics: each API request served through the filter chain is
// recorded once in kube's apiserver_request_total and
// apiserver_request_duration_seconds, with the labels kube-apiserver gives
// it; a path no route serves adds no series.
func TestRequestMetrics(t *testing.T) {
	e, err := buildFuzzEnv(true)
	if err != nil {
		t.Fatal(err)
	}
	c := metricsClient{t: t, s: e.s}
	const ns = "/api/v1/namespaces/" + fuzzNS
	tests := []struct {
		name                      string
		method, target, ct, body  string
		wantCode                  int
		verb, group, version, res string
		sub, scope, dryRun        string
	}{
		{"a create is POST, scope resource", http.MethodPost, ns + "/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m1"}}`,
			201, "POST", "", "v1", "configmaps", "", "resource", ""},
		{"a get is GET, scope resource", http.MethodGet, ns + "/configmaps/cm", "", "",
			200, "GET", "", "v1", "configmaps", "", "resource", ""},
		{"a get of a missing object is its 404", http.MethodGet, ns + "/configmaps/nope", "", "",
			404, "GET", "", "v1", "configmaps", "", "resource", ""},
		{"a list in a namespace is LIST, scope namespace", http.MethodGet, ns + "/configmaps", "", "",
			200, "LIST", "", "v1", "configmaps", "", "namespace", ""},
		{"a list across namespaces is LIST, scope cluster", http.MethodGet, "/api/v1/configmaps", "", "",
			200, "LIST", "", "v1", "configmaps", "", "cluster", ""},
		{"a dry run carries dry_run", http.MethodPost, ns + "/configmaps?dryRun=All", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m2"}}`,
			201, "POST", "", "v1", "configmaps", "", "resource", "All"},
		{"server-side apply is APPLY", http.MethodPatch, ns + "/configmaps/m3?fieldManager=test", "application/apply-patch+yaml",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m3"}}`,
			201, "APPLY", "", "v1", "configmaps", "", "resource", ""},
		{"a subresource is recorded under it", http.MethodGet, ns + "/pods/p/status", "", "",
			200, "GET", "", "v1", "pods", "status", "resource", ""},
		{"a virtual resource is recorded like a stored one", http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`,
			201, "POST", "authentication.k8s.io", "v1", "selfsubjectreviews", "", "resource", ""},
		{"a group resource carries its group", http.MethodGet, "/apis/rbac.authorization.k8s.io/v1/clusterroles/cr", "", "",
			200, "GET", "rbac.authorization.k8s.io", "v1", "clusterroles", "", "resource", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			labels := map[string]string{
				"verb": tt.verb, "group": tt.group, "version": tt.version, "resource": tt.res, "subresource": tt.sub,
				"scope": tt.scope, "dry_run": tt.dryRun, "component": "apiserver",
			}
			withCode := map[string]string{"code": strconv.Itoa(tt.wantCode)}
			for k, v := range labels {
				withCode[k] = v
			}
			before := c.scrape()
			rec := c.do(tt.method, tt.target, tt.ct, tt.body, user.SystemPrivilegedGroup)
			if rec.Code != tt.wantCode {
				t.Fatalf("%s %s: %d, want %d: %s", tt.method, tt.target, rec.Code, tt.wantCode, rec.Body)
			}
			after := c.scrape()
			n0, _ := sample(before, "apiserver_request_total", withCode)
			n1, ok := sample(after, "apiserver_request_total", withCode)
			if !ok || n1-n0 != 1 {
				t.Fatalf("apiserver_request_total%v went from %v to %v (found %v), want one more", withCode, n0, n1, ok)
			}
			d0, _ := sample(before, "apiserver_request_duration_seconds", labels)
			d1, _ := sample(after, "apiserver_request_duration_seconds", labels)
			if d1-d0 != 1 {
				t.Fatalf("apiserver_request_duration_seconds%v observed %v requests, want 1", labels, d1-d0)
			}
		})
	}

	t.Run("a path no route serves adds no series", func(t *testing.T) {
		for _, target := range []string{"/api/v1/foos", ns + "/configmaps/cm/nosuch", "/apis/example.com/v9/things"} {
			if rec := c.do(http.MethodGet, target, "", "", user.SystemPrivilegedGroup); rec.Code != http.StatusNotFound {
				t.Fatalf("GET %s: %d, want 404", target, rec.Code)
			}
		}
		fams := c.scrape()
		for _, res := range []string{"foos", "things"} {
			if _, ok := sample(fams, "apiserver_request_total", map[string]string{"resource": res}); ok {
				t.Fatalf("a request for an unserved resource %q was recorded", res)
			}
		}
		if _, ok := sample(fams, "apiserver_request_total", map[string]string{"subresource": "nosuch"}); ok {
			t.Fatal("a request for an unserved subresource was recorded")
		}
	})

	t.Run("a deprecated version is reported with its removal release", func(t *testing.T) {
		rec := c.do(http.MethodPost, "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews", "application/json",
			`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"SelfSubjectReview"}`, user.SystemPrivilegedGroup)
		if rec.Code != http.StatusCreated {
			t.Fatalf("v1beta1 SelfSubjectReview: %d %s", rec.Code, rec.Body)
		}
		v, ok := sample(c.scrape(), "apiserver_requested_deprecated_apis", map[string]string{
			"group": "authentication.k8s.io", "version": "v1beta1", "resource": "selfsubjectreviews"})
		if !ok || v != 1 {
			t.Fatalf("apiserver_requested_deprecated_apis for v1beta1 selfsubjectreviews = %v (found %v), want 1", v, ok)
		}
	})

	t.Run("a watch is long-running while it runs, and recorded when it ends", func(t *testing.T) {
		watchLabels := map[string]string{"verb": "WATCH", "resource": "configmaps", "scope": "namespace"}
		before := c.scrape()
		n0, _ := sample(before, "apiserver_request_total", watchLabels)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := httptest.NewRequest(http.MethodGet, ns+"/configmaps?watch=true", nil).WithContext(ctx)
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "watcher", Organization: []string{user.SystemPrivilegedGroup}}}
		req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.s.Handler().ServeHTTP(httptest.NewRecorder(), req)
		}()
		running := func(fams map[string]*dto.MetricFamily) (longRunning, registered, watchers float64) {
			longRunning, _ = sample(fams, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": "configmaps"})
			registered, _ = sample(fams, "apiserver_registered_watchers", map[string]string{"group": "", "version": "v1", "kind": "ConfigMap"})
			watchers, _ = sample(fams, "trustplane_watch_cache_watchers", nil)
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			l, r, w := running(c.scrape())
			if l == 1 && r == 1 && w == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("while a watch runs: longrunning %v, registered watchers %v, watch cache watchers %v; want 1 each", l, r, w)
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end with its context")
		}
		after := c.scrape()
		if l, r, _ := running(after); l != 0 || r != 0 {
			t.Fatalf("after the watch: longrunning %v, registered watchers %v; want 0", l, r)
		}
		if n1, _ := sample(after, "apiserver_request_total", watchLabels); n1-n0 != 1 {
			t.Fatalf("the ended watch was recorded %v times, want once", n1-n0)
		}
	})

	t.Run("the watch cache and the stored objects are reported", func(t *testing.T) {
		fams := c.scrape()
		for _, name := range []string{"trustplane_watch_cache_events", "trustplane_watch_cache_bytes", "trustplane_watch_cache_oldest_resource_version",
			"trustplane_watch_cache_resource_version", "trustplane_watch_cache_events_received_total", "trustplane_watch_cache_terminated_watchers_total"} {
			if _, ok := sample(fams, name, nil); !ok {
				t.Errorf("%s is missing", name)
			}
		}
		if rv, _ := sample(fams, "trustplane_watch_cache_resource_version", nil); rv != float64(e.log.f.AppliedIndex()) {
			t.Errorf("trustplane_watch_cache_resource_version = %v, want the applied index %d", rv, e.log.f.AppliedIndex())
		}
		// The first scrape of this server counted the objects.
		want := e.log.f.Count(fsm.Prefix{Resource: "configmaps"})
		if got, ok := sample(fams, "apiserver_storage_objects", map[string]string{"resource": "configmaps"}); !ok || got < 1 {
			t.Errorf("apiserver_storage_objects{resource=configmaps} = %v (found %v); the fsm holds %d", got, ok, want)
		}
		if _, ok := sample(fams, "apiserver_storage_objects", map[string]string{"resource": "certificatesigningrequests.certificates.k8s.io"}); !ok {
			t.Error("apiserver_storage_objects lacks a group resource, labelled as kube labels it")
		}
		for _, name := range []string{"process_cpu_seconds_total", "go_goroutines"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("kube's registry lacks %s", name)
			}
		}
	})
}

// TestObjectCountsRefreshAtMostOncePerPeriod: apiserver_storage_objects is
// counted when scraped, but not again before objectCountPeriod has passed.
func TestObjectCountsRefreshAtMostOncePerPeriod(t *testing.T) {
	e, err := buildFuzzEnv(true)
	if err != nil {
		t.Fatal(err)
	}
	c := metricsClient{t: t, s: e.s}
	stor := e.s.reg.Storage()
	cms := schema.GroupResource{Resource: "configmaps"}
	counter := e.s.objects
	t0 := time.Unix(1_000_000, 0)
	counted := func() float64 {
		t.Helper()
		v, ok := sample(c.scrapeNoRefresh(), "apiserver_storage_objects", map[string]string{"resource": "configmaps"})
		if !ok {
			t.Fatal("apiserver_storage_objects{resource=configmaps} is missing")
		}
		return v
	}
	counter.refresh(t0)
	first := counted()
	if want := float64(stor.ObjectCounts()[cms]); first != want {
		t.Fatalf("first count %v, want %v", first, want)
	}
	if rec := c.do(http.MethodPost, "/api/v1/namespaces/"+fuzzNS+"/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"counted"}}`,
		user.SystemPrivilegedGroup); rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	tests := []struct {
		name string
		at   time.Time
		want float64
	}{
		{"within the period the last count stands", t0.Add(objectCountPeriod - time.Second), first},
		{"after the period the objects are counted again", t0.Add(objectCountPeriod), first + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counter.refresh(tt.at)
			if got := counted(); got != tt.want {
				t.Fatalf("apiserver_storage_objects{resource=configmaps} = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCustomResourceRequestMetrics: requests for a custom resource, its
// status and its scale are recorded under the resource's group, version
// and resource while its definition serves them, as kube's apiextensions
// server records them; a version it does not serve, and the resource once
// the definition is gone, add nothing.
func TestCustomResourceRequestMetrics(t *testing.T) {
	s := newCustomServer(t, nil)
	c := metricsClient{t: t, s: s}
	const coll = "/apis/example.com/v1/namespaces/default/gizmos"
	tests := []struct {
		name                     string
		method, target, ct, body string
		code                     int
		verb, sub, scope         string
	}{
		{"a create", http.MethodPost, coll, "application/json", `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g"},"spec":{"replicas":1}}`,
			201, "POST", "", "resource"},
		{"a get", http.MethodGet, coll + "/g", "", "", 200, "GET", "", "resource"},
		{"a list", http.MethodGet, coll, "", "", 200, "LIST", "", "namespace"},
		{"a get of status", http.MethodGet, coll + "/g/status", "", "", 200, "GET", "status", "resource"},
		{"a get of scale", http.MethodGet, coll + "/g/scale", "", "", 200, "GET", "scale", "resource"},
		{"a patch of scale", http.MethodPatch, coll + "/g/scale", "application/merge-patch+json", `{"spec":{"replicas":2}}`, 200, "PATCH", "scale", "resource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			labels := map[string]string{"verb": tt.verb, "group": "example.com", "version": "v1", "resource": "gizmos",
				"subresource": tt.sub, "scope": tt.scope, "component": "apiserver", "code": strconv.Itoa(tt.code)}
			n0, _ := sample(c.scrape(), "apiserver_request_total", labels)
			if rec := c.do(tt.method, tt.target, tt.ct, tt.body, user.SystemPrivilegedGroup); rec.Code != tt.code {
				t.Fatalf("%s %s: %d %s", tt.method, tt.target, rec.Code, rec.Body)
			}
			if n1, _ := sample(c.scrape(), "apiserver_request_total", labels); n1-n0 != 1 {
				t.Fatalf("apiserver_request_total%v went from %v to %v, want one more", labels, n0, n1)
			}
		})
	}
	unrecorded := []struct {
		name, target string
		before       func()
	}{
		{"a version the definition does not serve", "/apis/example.com/v9/namespaces/default/gizmos", func() {}},
		{"a subresource the definition does not have", coll + "/g/nosuch", func() {}},
		{"the resource once its definition is gone", coll, func() { s.reg.ServeCustom("gizmo-uid", nil); s.CustomResourcesChanged() }},
	}
	for _, tt := range unrecorded {
		t.Run(tt.name+" is not recorded", func(t *testing.T) {
			tt.before()
			total := func() float64 {
				v, _ := sample(c.scrape(), "apiserver_request_total", map[string]string{"group": "example.com"})
				return v
			}
			n0 := total()
			if rec := c.do(http.MethodGet, tt.target, "", "", user.SystemPrivilegedGroup); rec.Code != http.StatusNotFound {
				t.Fatalf("GET %s: %d, want 404", tt.target, rec.Code)
			}
			if n1 := total(); n1 != n0 {
				t.Fatalf("apiserver_request_total{group=example.com} went from %v to %v", n0, n1)
			}
		})
	}
}

// TestStorageObjectsFollowStores: apiserver_storage_objects has a series
// for a resource exactly while the storage layer has a store for it. A
// custom resource's store is forgotten when its definition is deleted or
// no longer serves it; its series must go with it (kube 1.33 keeps the
// series of a deleted definition for ever), and a new resource's series
// comes at the next scrape, not a count period later.
func TestStorageObjectsFollowStores(t *testing.T) {
	e, err := buildFuzzEnv(true)
	if err != nil {
		t.Fatal(err)
	}
	c := metricsClient{t: t, s: e.s}
	stor := e.s.reg.Storage()
	gizmos := storage.ResourceConfig{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}, Custom: true}
	build := func() *storage.Store {
		st, err := stor.ForResource(gizmos)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	var st *storage.Store
	steps := []struct {
		name   string
		do     func()
		series bool
	}{
		{"a resource without a store has no series", func() {}, false},
		{"a new store's resource is counted at the next scrape", func() { st = build() }, true},
		{"a forgotten store's series is gone at the next scrape", func() { stor.Forget(st) }, false},
		{"a store built again brings the series back", func() { st = build() }, true},
	}
	c.scrape() // the first count, so that the steps run within one count period
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do()
			fams := c.scrape()
			if _, ok := sample(fams, "apiserver_storage_objects", map[string]string{"resource": "gizmos.example.com"}); ok != step.series {
				t.Fatalf("series of gizmos.example.com present = %v, want %v", ok, step.series)
			}
			if _, ok := sample(fams, "apiserver_storage_objects", map[string]string{"resource": "configmaps"}); !ok {
				t.Fatal("the series of configmaps went too")
			}
		})
	}
}

// scrapeNoRefresh reads the registries without counting the objects first.
func (c metricsClient) scrapeNoRefresh() map[string]*dto.MetricFamily {
	c.t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, metricsPath, nil)
	req.Header.Set("Accept", "text/plain")
	c.s.metrics.ServeHTTP(rec, req)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return fams
}

// TestMetricsNeedCredentials: /metrics is not a public path; who may read
// it is RBAC's decision (e2e TestE2EMetrics), and no credentials is 401.
func TestMetricsNeedCredentials(t *testing.T) {
	s := testServer(t)
	h := s.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metricsPath, nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("anonymous GET /metrics: %d, want 401", rec.Code)
	}
}

// TestTrackingWriter: the response wrapper keeps the first status and the
// body's size, counts a flush as the start of a 200, and still flushes and
// unwraps, which watches and http.ResponseController need.
func TestTrackingWriter(t *testing.T) {
	tests := []struct {
		name       string
		write      func(w http.ResponseWriter)
		wantStatus int
		wantSize   int64
	}{
		{"nothing written", func(http.ResponseWriter) {}, 0, 0},
		{"a status then a body", func(w http.ResponseWriter) { w.WriteHeader(404); w.Write([]byte("gone")) }, 404, 4},
		{"a body alone is a 200", func(w http.ResponseWriter) { w.Write([]byte("ok")); w.Write([]byte("!")) }, 200, 3},
		{"a second status is not the one sent", func(w http.ResponseWriter) { w.WriteHeader(201); w.WriteHeader(500) }, 201, 0},
		{"a flush starts a 200", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, 200, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tw := &trackingWriter{ResponseWriter: rec}
			tt.write(tw)
			if tw.status != tt.wantStatus || tw.size != tt.wantSize {
				t.Fatalf("status %d size %d, want %d %d", tw.status, tw.size, tt.wantStatus, tt.wantSize)
			}
		})
	}
	rec := httptest.NewRecorder()
	tw := &trackingWriter{ResponseWriter: rec}
	if err := http.NewResponseController(tw).Flush(); err != nil || !rec.Flushed {
		t.Fatalf("ResponseController.Flush through the wrapper: %v, flushed %v", err, rec.Flushed)
	}
}

// nopWriter is a ResponseWriter that keeps nothing and allocates nothing.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header       { return w.h }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

// meteredTokenReview is a TokenReview POST as withRequestMetrics sees it
// (RequestInfo and user in the context, withRecovery's writer), and the
// filter around a handler that answers 201.
func meteredTokenReview(tb testing.TB, s *Server) (*http.Request, *trackingWriter, http.Handler) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", nil)
	info, err := s.infos.NewRequestInfo(req)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := genericapirequest.WithRequestInfo(req.Context(), info)
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "bench", Groups: []string{user.AllAuthenticated}})
	h := s.withRequestMetrics(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	return req.WithContext(ctx), &trackingWriter{ResponseWriter: nopWriter{h: http.Header{}}}, h
}

// TestRequestMetricsAllocateOnlyWhatKubeDoes: per request the filter
// allocates nothing beyond kube's MonitorRequest: the route table, the
// response wrapper withRecovery made and the deferred record cost none.
func TestRequestMetricsAllocateOnlyWhatKubeDoes(t *testing.T) {
	e := newFuzzEnv(t)
	req, tw, h := meteredTokenReview(t, e.s)
	info, _ := genericapirequest.RequestInfoFrom(req.Context())
	route, ok := e.s.routes[routeKey{info.APIGroup, info.APIVersion, info.Resource, info.Subresource}]
	if !ok {
		t.Fatal("tokenreviews is not in the route table")
	}
	filtered := testing.AllocsPerRun(200, func() {
		tw.status, tw.size = 0, 0
		h.ServeHTTP(tw, req)
	})
	kube := testing.AllocsPerRun(200, func() {
		recordRequest(req, info, route, http.StatusCreated, 0, time.Millisecond)
	})
	if filtered > kube {
		t.Fatalf("the filter allocates %v per request, MonitorRequest alone %v", filtered, kube)
	}
}

// BenchmarkRequestMetrics: the filter's cost per request, MonitorRequest
// included (go test -run '^$' -bench RequestMetrics -benchmem ./api/).
func BenchmarkRequestMetrics(b *testing.B) {
	e := newFuzzEnv(b)
	req, tw, h := meteredTokenReview(b, e.s)
	b.ReportAllocs()
	for b.Loop() {
		tw.status, tw.size = 0, 0
		h.ServeHTTP(tw, req)
	}
}
