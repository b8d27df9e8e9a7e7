package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The Grafana dashboard and the Prometheus alerting rules in deploy/ (issue
// 15 point 10). These tests keep them honest: both files parse and have the
// shape Grafana and Prometheus expect, and every metric and label their
// PromQL uses is one a real node serves at /metrics.
var (
	dashboardPath = filepath.Join("..", "deploy", "grafana", "trustplane.json")
	alertsPath    = filepath.Join("..", "deploy", "prometheus", "trustplane-alerts.yaml")
)

// targetLabels are the labels Prometheus attaches to every series of a
// scrape (job, instance) and those the Prometheus operator's ServiceMonitor
// adds (namespace, pod, service, endpoint, container): never in /metrics.
var targetLabels = map[string]bool{
	"job": true, "instance": true, "namespace": true, "pod": true, "service": true, "endpoint": true, "container": true,
}

// scrapeMetrics are series Prometheus makes for each scrape itself.
var scrapeMetrics = map[string]bool{"up": true}

type dashboard struct {
	Title         string           `json:"title"`
	UID           string           `json:"uid"`
	SchemaVersion int              `json:"schemaVersion"`
	Panels        []dashboardPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *dashboardDS             `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Panels     []dashboardPanel         `json:"panels"` // a collapsed row's
	Targets    []struct {
		Expr       string       `json:"expr"`
		RefID      string       `json:"refId"`
		Datasource *dashboardDS `json:"datasource"`
	} `json:"targets"`
}

type dashboardDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// promExpr is one PromQL expression of the files, named for the errors.
type promExpr struct{ where, expr string }

// loadDashboard reads the dashboard, checks its shape and returns its
// expressions: every panel target's, and the metric selectors of its
// label_values variables.
func loadDashboard(t *testing.T) []promExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	// Grafana 10.4 and 11 write 39 (11.3 writes 40 and reads 39).
	if d.SchemaVersion < 39 || d.SchemaVersion > 41 || d.Title == "" || d.UID == "" {
		t.Errorf("dashboard schemaVersion %d title %q uid %q; want 39 to 41 (Grafana 10.4 to 12), a title and a uid", d.SchemaVersion, d.Title, d.UID)
	}
	var exprs []promExpr
	vars := map[string]bool{}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			if string(v.Query) != `"prometheus"` {
				t.Errorf("variable %s: query %s, want a prometheus data source", v.Name, v.Query)
			}
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
				continue
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
				continue
			}
			// The label asked for must exist: "sum by (label) (selector)" checks it.
			exprs = append(exprs, promExpr{"variable " + v.Name, fmt.Sprintf("sum by (%s) (%s)", m[2], m[1])})
		}
	}
	for _, want := range []string{"datasource", "job", "instance"} {
		if !vars[want] {
			t.Errorf("dashboard has no %s variable", want)
		}
	}
	ids := map[int]bool{}
	rows := 0
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d is zero or not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v does not fit Grafana's 24 columns", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				rows++
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				for _, ds := range []*dashboardDS{p.Datasource, tg.Datasource} {
					if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
						t.Errorf("panel %q: data source %+v, want prometheus ${datasource}", p.Title, ds)
					}
				}
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: a target without expr or with a missing or repeated refId %q", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
					t.Errorf("panel %q: %s does not follow the instance variable", p.Title, tg.Expr)
				}
				exprs = append(exprs, promExpr{fmt.Sprintf("panel %q %s", p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	walk(d.Panels)
	if rows < 6 {
		t.Errorf("dashboard has %d rows, want cluster health, API, storage and watch cache, controllers, deprecated APIs, process", rows)
	}
	return exprs
}

// loadAlerts reads the rule file, checks each rule's shape and returns
// their expressions.
func loadAlerts(t *testing.T) []promExpr {
	t.Helper()
	b, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	var exprs []promExpr
	seen := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: no name or no rules", g.Name)
		}
		for _, r := range g.Rules {
			key := r.Alert + "/" + r.Labels["severity"]
			where := "alert " + key
			switch {
			case r.Alert == "" || r.Record != "":
				t.Errorf("group %s: a rule that is not an alert: %+v", g.Name, r)
			case seen[key]:
				t.Errorf("%s: twice", where)
			case r.Expr == "":
				t.Errorf("%s: no expr", where)
			case !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]):
				t.Errorf("%s: severity %q, want critical, warning or info", where, r.Labels["severity"])
			case r.Annotations["summary"] == "" || r.Annotations["description"] == "":
				t.Errorf("%s: no summary or description", where)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", where, r.For, err)
			}
			seen[key] = true
			exprs = append(exprs, promExpr{where, r.Expr})
		}
	}
	for _, want := range []string{"TrustplaneNodeDown", "TrustplaneNoLeader", "TrustplaneFrequentLeaderChanges", "TrustplaneAppliedIndexLagging",
		"TrustplaneHighErrorRatio", "TrustplaneHighRequestLatency", "TrustplaneSlowFsync", "TrustplaneDeprecatedAPIRequested",
		"TrustplaneSlowWatchersCutOff", "TrustplaneMemoryNearLimit"} {
		if !slices.ContainsFunc(exprs, func(e promExpr) bool { return strings.HasPrefix(e.where, "alert "+want+"/") }) {
			t.Errorf("no alert %s", want)
		}
	}
	return exprs
}

// TestGrafanaAndAlertsParse checks the two files' shape and that the
// lexer reads every expression, without a node.
func TestGrafanaAndAlertsParse(t *testing.T) {
	for _, e := range append(loadDashboard(t), loadAlerts(t)...) {
		if _, err := promqlRefs(e.expr); err != nil {
			t.Errorf("%s: %v", e.where, err)
		}
	}
}

// scrapedLabels is, per metric name a query may use (histograms' _bucket,
// _sum and _count, summaries' _sum and _count), the label names its series
// carry in a scrape.
func scrapedLabels(fams map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	add := func(name string, extra ...string) map[string]bool {
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, l := range extra {
			out[name][l] = true
		}
		return out[name]
	}
	for name, f := range fams {
		names := []string{name}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			add(name+"_bucket", "le")
			names = append(names, name+"_bucket", name+"_sum", name+"_count")
		case dto.MetricType_SUMMARY:
			add(name, "quantile")
			names = append(names, name+"_sum", name+"_count")
		}
		for _, n := range names {
			ls := add(n)
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					ls[l.GetName()] = true
				}
			}
		}
	}
	return out
}

// checkExpr returns what expr uses that the scrape does not have: a
// metric, a label a selector matches on that metric, or a label a
// grouping clause names that none of the expression's metrics carries.
func checkExpr(expr string, scraped map[string]map[string]bool) []string {
	q, err := promqlRefs(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, m := range q.metrics {
		if scrapeMetrics[m] {
			continue
		}
		ls, ok := scraped[m]
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not served", m))
			continue
		}
		for _, l := range q.selector[m] {
			if !ls[l] && !targetLabels[l] {
				problems = append(problems, fmt.Sprintf("%s has no label %s", m, l))
			}
		}
	}
	for _, l := range q.grouping {
		if targetLabels[l] || slices.ContainsFunc(q.metrics, func(m string) bool { return scraped[m][l] }) {
			continue
		}
		problems = append(problems, fmt.Sprintf("label %s is on none of %v", l, q.metrics))
	}
	return problems
}

// TestE2EGrafanaAndAlerts scrapes a real node after the requests that
// make every series the files use appear (a create, a 404, a watch, a
// request to a deprecated version; the controllers' workqueues) and checks
// each metric and label of the dashboard and the alerting rules against
// it. It first checks that the check can fail.
func TestE2EGrafanaAndAlerts(t *testing.T) {
	exprs := append(loadDashboard(t), loadAlerts(t)...)
	n := startNode(t, "--runtime-config", "authentication.k8s.io/v1beta1=true") // a deprecated version to request
	n.trustplaneOnly(t, "trustplane's raft and watch cache metrics")
	ctx := context.Background()
	cs := n.clientset()
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "grafana-e2e"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, n.httpClient(), http.MethodPost, n.url()+"/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
		jsonHeader("application/json"), []byte(`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"SelfSubjectReview"}`)); r.code != http.StatusCreated {
		t.Fatalf("v1beta1 SelfSubjectReview: %d %s", r.code, r.body)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := cs.CoreV1().ConfigMaps("default").Watch(wctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	scraped := scrapedLabels(metricFamilies(t, n.httpClient(), n))

	// The check catches a metric that is not served, a histogram's
	// family name used where its _bucket is meant, a label a metric does
	// not have, and a grouping label on none of the metrics.
	for _, bad := range []string{
		`rate(apiserver_requests_total[5m])`,
		`histogram_quantile(0.99, sum by (le) (rate(trustplane_raft_wal_fsync_duration_seconds[5m])))`,
		`trustplane_raft_term{verb="GET"}`,
		`sum by (verbs) (rate(apiserver_request_total[5m]))`,
		`max by (name) (trustplane_raft_term)`,
	} {
		if problems := checkExpr(bad, scraped); len(problems) == 0 {
			t.Errorf("checkExpr(%s) found nothing wrong", bad)
		}
	}
	if problems := checkExpr(`histogram_quantile(0.5, sum by (pod, verb, le) (rate(apiserver_request_duration_seconds_bucket{job="x", verb!="WATCH"}[5m])))`, scraped); len(problems) > 0 {
		t.Errorf("a good expression: %v", problems)
	}

	for _, e := range exprs {
		for _, p := range checkExpr(e.expr, scraped) {
			t.Errorf("%s: %s", e.where, p)
		}
	}
}
