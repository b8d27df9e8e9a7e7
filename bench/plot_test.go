package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// scaled is a result of one server at objects=n.
func scaled(trustplane bool, nodes int, objects string, ws ...WorkloadResult) *Result {
	r := result(ws...)
	r.Environment.Nodes = nodes
	r.Environment.ServerVersion = "v1.33.13"
	if trustplane {
		r.Environment.TrustplaneVersion = "v1.33.13+trustplane"
	}
	r.Environment.Flags = map[string]string{"objects": objects, "watchers": "50"}
	return r
}

func TestPlotSeries(t *testing.T) {
	results := []*Result{
		scaled(true, 1, "100000", wl("create", 900, 5, 30), wl("get", 4000, 1, 9)),
		scaled(true, 1, "10000", wl("create", 1000, 4, 20), wl("get", 5000, 1, 8)),
		scaled(false, 1, "10000", wl("create", 300, 10, 60)),
		scaled(true, 1, "1000000", wl("create", 0, 0, 0)), // failed: no point
	}
	got, err := PlotSeries(PlotSpec{X: "objects", Y: []string{"create:ops", "get:ops"}}, results)
	if err != nil {
		t.Fatal(err)
	}
	want := []Series{
		{"create:ops — trustplane, 1 node(s)", []Point{{10000, 1000}, {100000, 900}}},
		{"create:ops — kube-apiserver v1.33.13, 1 node(s)", []Point{{10000, 300}}},
		{"get:ops — trustplane, 1 node(s)", []Point{{10000, 5000}, {100000, 4000}}},
	}
	if len(got) != len(want) {
		t.Fatalf("series %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || len(got[i].Points) != len(want[i].Points) {
			t.Fatalf("series %d: %+v, want %+v", i, got[i], want[i])
		}
		for j := range want[i].Points {
			if got[i].Points[j] != want[i].Points[j] {
				t.Errorf("series %d point %d: %+v, want %+v (sorted by x)", i, j, got[i].Points[j], want[i].Points[j])
			}
		}
	}

	for _, tc := range []struct {
		name string
		spec PlotSpec
	}{
		{"no y", PlotSpec{X: "objects"}},
		{"unknown metric", PlotSpec{X: "objects", Y: []string{"get:p75"}}},
		{"no workload part", PlotSpec{X: "objects", Y: []string{"p99"}}},
		{"a flag the results lack", PlotSpec{X: "duration-ms", Y: []string{"get:p99"}}},
		{"no result has the workload", PlotSpec{X: "objects", Y: []string{"watch:p50"}}},
		{"two units on one axis", PlotSpec{X: "objects", Y: []string{"create:ops", "get:p99"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := PlotSeries(tc.spec, results); !errors.Is(err, ErrPlot) {
				t.Fatalf("err %v, want ErrPlot", err)
			}
		})
	}
}

func TestWriteSVG(t *testing.T) {
	spec := PlotSpec{X: "objects", Y: []string{"get:p50", "get:p99"}, LogX: true, Title: "GETs <at> scale"}
	series := []Series{
		{"get:p50 — trustplane", []Point{{10000, 2}, {100000, 3}, {1000000, 5}}},
		{"get:p99 — trustplane", []Point{{10000, 8}, {100000, 9}, {1000000, 12}}},
	}
	var a, b bytes.Buffer
	if err := WriteSVG(&a, spec, series); err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(&b, spec, series); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatal("two renderings of the same figures differ")
	}
	// It is well-formed XML, with one polyline per series and one point
	// per figure.
	dec := xml.NewDecoder(strings.NewReader(a.String()))
	counts := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, a.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
	if counts["svg"] != 1 || counts["polyline"] != 2 || counts["circle"] != 6 {
		t.Errorf("elements %v, want 1 svg, 2 polylines, 6 circles", counts)
	}
	out := a.String()
	for _, want := range []string{"GETs &lt;at&gt; scale", ">10k<", ">100k<", ">1M<", "objects (log scale)", "p50 ms, p99 ms", "get:p99 — trustplane", ">15<"} {
		if !strings.Contains(out, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if err := WriteSVG(io.Discard, spec, nil); !errors.Is(err, ErrPlot) {
		t.Errorf("no series: err %v, want ErrPlot", err)
	}
}

func TestNiceAxis(t *testing.T) {
	for _, tc := range []struct {
		max  float64
		want []float64
	}{
		{1050, []float64{0, 500, 1000, 1500}},
		{12, []float64{0, 5, 10, 15}},
		{0.9, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
	} {
		got := newAxis([]float64{tc.max / 2, tc.max}, false, 0, 1).ticks()
		if len(got) != len(tc.want) {
			t.Errorf("max %v: ticks %v, want %v", tc.max, got, tc.want)
			continue
		}
		for i := range got {
			if !same(got[i], tc.want[i]) {
				t.Errorf("max %v: ticks %v, want %v", tc.max, got, tc.want)
				break
			}
		}
	}
}

func TestTickLabel(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1.5, "1.5"}, {12.345, "12.3"}, {1000, "1k"}, {2500, "2.5k"}, {10000, "10k"},
		{1e6, "1M"}, {1.5e6, "1.5M"}, {1234, "1234"}, {0.0123, "0.0123"},
	} {
		if got := tickLabel(tc.v); got != tc.want {
			t.Errorf("tickLabel(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestPlotRSSInMiB(t *testing.T) {
	w := wl("get", 4000, 1, 9)
	w.ServerRSSBytes = 300 << 20
	got, err := PlotSeries(PlotSpec{X: "objects", Y: []string{"get:rss"}}, []*Result{scaled(true, 1, "10000", w)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Points) != 1 || got[0].Points[0] != (Point{10000, 300}) {
		t.Fatalf("series %+v, want one point at (10000, 300 MiB)", got)
	}
	if u := metricUnit("rss"); u != "server RSS MiB" {
		t.Fatalf("unit %q", u)
	}
}
