package e2e_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// metricFamilies scrapes GET /metrics with c and parses it with
// Prometheus' text parser.
func metricFamilies(t testing.TB, c *http.Client, n *node) map[string]*dto.MetricFamily {
	t.Helper()
	r := do(t, c, http.MethodGet, n.url()+"/metrics", nil, nil)
	if r.code != http.StatusOK {
		t.Fatalf("%s: GET /metrics: %d %s", n.name, r.code, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("%s: /metrics does not parse: %v", n.name, err)
	}
	return fams
}

// series returns the series of family name whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// value sums the matching series: counters and gauges by value, histograms
// by sample count. found is false when none matches.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, found bool) {
	for _, m := range series(fams, name, want) {
		found = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, found
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	slices.Sort(out)
	return out
}

// TestE2EMetrics: a node's /metrics, scraped over TLS after a create, a
// get, a 404 and a watch, parses with Prometheus' text parser and carries
// kube's request metrics with kube's labels, the node's raft figures (it
// leads, and has applied the created object), the watch cache, stored
// objects, the controllers' workqueues and the process and Go collectors.
// system:monitoring and system:masters may read it; a plain user gets
// kube's 403 and no credentials 401.
func TestE2EMetrics(t *testing.T) {
	n := startNode(t)
	n.trustplaneOnly(t, "trustplane's raft and watch cache metrics")
	cs := n.clientset()
	ctx := context.Background()
	const ns = "default"

	created, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "metrics-e2e"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "metrics-e2e", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "no-such-configmap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get of a missing configmap: %v, want 404", err)
	}
	admin := n.httpClient()

	// A watch is long-running while it runs. The controllers watch
	// configmaps too, so the figures are compared with ours open and shut.
	watchLabels := map[string]string{"verb": "WATCH", "resource": "configmaps", "scope": "namespace"}
	longRunning := func(fams map[string]*dto.MetricFamily) (float64, float64) {
		l, _ := value(fams, "apiserver_longrunning_requests", watchLabels)
		r, _ := value(fams, "apiserver_registered_watchers", map[string]string{"group": "", "version": "v1", "kind": "ConfigMap"})
		return l, r
	}
	before := metricFamilies(t, admin, n)
	watchesDone, _ := value(before, "apiserver_request_total", watchLabels)
	l0, r0 := longRunning(before)
	wctx, stopWatch := context.WithCancel(ctx)
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "our watch to be counted as long-running", func() bool {
		l, r := longRunning(metricFamilies(t, admin, n))
		return l >= l0+1 && r >= r0+1
	})
	w.Stop()
	stopWatch()
	waitFor(t, 10*time.Second, "the ended watch to be recorded", func() bool {
		v, _ := value(metricFamilies(t, admin, n), "apiserver_request_total", watchLabels)
		return v >= watchesDone+1
	})

	fams := metricFamilies(t, admin, n)
	t.Run("kube's request metrics, with kube's labels", func(t *testing.T) {
		requestLabels := []string{"code", "component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version"}
		for _, tc := range []struct {
			verb, code, scope string
		}{
			{"POST", "201", "resource"},
			{"GET", "200", "resource"},
			{"GET", "404", "resource"},
			{"WATCH", "200", "namespace"},
		} {
			want := map[string]string{"verb": tc.verb, "code": tc.code, "scope": tc.scope, "group": "", "version": "v1",
				"resource": "configmaps", "subresource": "", "component": "apiserver", "dry_run": ""}
			ms := series(fams, "apiserver_request_total", want)
			if len(ms) != 1 || ms[0].GetCounter().GetValue() < 1 {
				t.Errorf("apiserver_request_total%v: %d series", want, len(ms))
				continue
			}
			if got := labelNames(ms[0]); !slices.Equal(got, requestLabels) {
				t.Errorf("apiserver_request_total labels %v, want kube's %v", got, requestLabels)
			}
			delete(want, "code")
			if v, ok := value(fams, "apiserver_request_duration_seconds", want); !ok || v < 1 {
				t.Errorf("apiserver_request_duration_seconds%v: %v (found %v)", want, v, ok)
			}
		}
		if f := fams["apiserver_request_duration_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Error("apiserver_request_duration_seconds is not a histogram")
		}
		if _, ok := value(fams, "apiserver_current_inflight_requests", map[string]string{"request_kind": "readOnly"}); !ok {
			t.Error("apiserver_current_inflight_requests{request_kind=readOnly} is missing")
		}
	})

	t.Run("raft figures of the node itself", func(t *testing.T) {
		rv, err := strconv.ParseUint(created.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			ok   func(v float64) bool
		}{
			{"trustplane_raft_is_leader", func(v float64) bool { return v == 1 }},
			{"trustplane_raft_has_leader", func(v float64) bool { return v == 1 }},
			{"trustplane_raft_term", func(v float64) bool { return v >= 1 }},
			{"trustplane_raft_leader_changes_seen_total", func(v float64) bool { return v >= 1 }},
			{"trustplane_raft_applied_index", func(v float64) bool { return v >= float64(rv) }},
			{"trustplane_raft_commit_index", func(v float64) bool { return v >= float64(rv) }},
			{"trustplane_raft_last_index", func(v float64) bool { return v >= float64(rv) }},
			{"trustplane_raft_apply_duration_seconds", func(v float64) bool { return v >= 1 }},
			{"trustplane_raft_wal_fsync_duration_seconds", func(v float64) bool { return v >= 1 }},
		} {
			if v, ok := value(fams, tc.name, nil); !ok || !tc.ok(v) {
				t.Errorf("%s = %v (found %v)", tc.name, v, ok)
			}
		}
		for _, name := range []string{"trustplane_raft_snapshot_save_duration_seconds", "trustplane_raft_snapshot_restore_duration_seconds"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("%s is missing", name)
			}
		}
	})

	t.Run("watch cache, stored objects, workqueues, process and Go", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			labels map[string]string
			min    float64
		}{
			{"trustplane_watch_cache_events_received_total", nil, 1},
			{"trustplane_watch_cache_events", nil, 1},
			{"trustplane_watch_cache_resource_version", nil, 1},
			{"trustplane_watch_cache_watchers", nil, 0},
			{"trustplane_watch_cache_terminated_watchers_total", nil, 0},
			{"apiserver_storage_objects", map[string]string{"resource": "configmaps"}, 1},
			{"apiserver_storage_objects", map[string]string{"resource": "namespaces"}, 3},
			{"workqueue_adds_total", nil, 0},
			// The controllers' API clients (informers list and watch).
			{"rest_client_requests_total", nil, 1},
			// Every gate, with its stage; WatchList is on here.
			{"kubernetes_feature_enabled", map[string]string{"name": "WatchList", "stage": "BETA"}, 1},
			{"kubernetes_feature_enabled", map[string]string{"name": "ClusterTrustBundle"}, 0},
			{"process_cpu_seconds_total", nil, 0},
			{"go_goroutines", nil, 1},
		} {
			if v, ok := value(fams, tc.name, tc.labels); !ok || v < tc.min {
				t.Errorf("%s%v = %v (found %v), want at least %v", tc.name, tc.labels, v, ok, tc.min)
			}
		}
	})

	t.Run("who may read it", func(t *testing.T) {
		client := func(cfg *rest.Config) *http.Client {
			tr, err := rest.TransportFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return &http.Client{Transport: tr, Timeout: 10 * time.Second}
		}
		if r := do(t, client(n.userConfig(t, "prometheus", "system:monitoring")), http.MethodGet, n.url()+"/metrics", nil, nil); r.code != http.StatusOK {
			t.Errorf("a system:monitoring user got %d, want 200", r.code)
		}
		r := do(t, client(n.userConfig(t, "bob", "developers")), http.MethodGet, n.url()+"/metrics", nil, nil)
		wantStatus(t, r, http.StatusForbidden, metav1.StatusReasonForbidden, `forbidden: User "bob" cannot get path "/metrics"`)
		if r := do(t, n.anonClient(), http.MethodGet, n.url()+"/metrics", nil, nil); r.code != http.StatusUnauthorized {
			t.Errorf("no credentials got %d, want 401", r.code)
		}
	})
}

// TestE2EMetricsCluster: on three nodes every node reports its own raft
// view (one leader; followers that know it), and a write sent to a
// follower is recorded by that follower, the node its client talks to,
// not again by the leader it forwarded it to (--execute-writes=leader:
// the forwarding mode; the default runs the write on the follower).
func TestE2EMetricsCluster(t *testing.T) {
	nodes := startCluster(t, 3, "--execute-writes", "leader")
	admins := adminClients(t, nodes)
	leader := -1
	waitFor(t, 30*time.Second, "one leader that every node names", func() bool {
		leader = -1
		for i, n := range nodes {
			st, err := raftStatus(admins[i], n)
			if err != nil || st.Leader == "" {
				return false
			}
			if st.State == "Leader" {
				leader = i
			}
		}
		return leader >= 0
	})
	follower := (leader + 1) % len(nodes)
	ctx := context.Background()
	if _, err := nodes[follower].clientset().CoreV1().PodTemplates("default").Create(ctx,
		&corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "metrics-forwarded"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	posted := map[string]string{"verb": "POST", "resource": "podtemplates", "code": "201"}
	for i, n := range nodes {
		fams := metricFamilies(t, admins[i], n)
		isLeader, _ := value(fams, "trustplane_raft_is_leader", nil)
		hasLeader, _ := value(fams, "trustplane_raft_has_leader", nil)
		if want := float64(boolInt(i == leader)); isLeader != want || hasLeader != 1 {
			t.Errorf("%s: is_leader %v has_leader %v; want %v and 1", n.name, isLeader, hasLeader, want)
		}
		v, _ := value(fams, "apiserver_request_total", posted)
		if want := float64(boolInt(i == follower)); v != want {
			t.Errorf("%s: apiserver_request_total%v = %v, want %v (recorded by the follower the client used only)", n.name, posted, v, want)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
