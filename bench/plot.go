package bench

import (
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrPlot: a plot was asked of results that cannot give it (an unknown
// metric, a flag a result lacks, no points).
var ErrPlot = errors.New("bench: cannot plot")

// PlotSpec says what a plot shows: for each result, the value of flag X
// (say "objects", "watchers", "list-size") against each metric of Y.
type PlotSpec struct {
	// X is the name of a bench flag every result recorded.
	X string
	// Y are metrics as WORKLOAD:METRIC, METRIC one of ops (ops/s), p50,
	// p90, p99 (milliseconds), cpu (server CPU ms per operation), rss
	// (the servers' resident memory at the end of the workload, MiB).
	Y []string
	// LogX and LogY use a log10 axis (for 10k, 100k, 1M).
	LogX, LogY bool
	Title      string
}

// Point is one result's value.
type Point struct{ X, Y float64 }

// Series is one line of a plot: one metric of the results of one server.
type Series struct {
	Name   string
	Points []Point
}

// metricValue reads metric of w.
func metricValue(w WorkloadResult, metric string) (float64, bool) {
	switch metric {
	case "ops":
		return w.OpsPerSec, true
	case "p50":
		return w.Latency.P50Ms, true
	case "p90":
		return w.Latency.P90Ms, true
	case "p99":
		return w.Latency.P99Ms, true
	case "cpu":
		return w.ServerCPUPerOpMs, true
	case "rss":
		return float64(w.ServerRSSBytes) / (1 << 20), true
	}
	return 0, false
}

// metricUnit names a metric's unit for the axis.
func metricUnit(metric string) string {
	switch metric {
	case "ops":
		return "ops/s"
	case "cpu":
		return "server CPU ms/op"
	case "rss":
		return "server RSS MiB"
	}
	return metric + " ms"
}

// serverLabel names the server a result measured, so that results of
// trustplane and of kube-apiserver become separate lines.
func serverLabel(r *Result) string {
	e := r.Environment
	name := "kube-apiserver " + orUnknown(e.ServerVersion)
	if e.TrustplaneVersion != "" {
		name = "trustplane"
	}
	return fmt.Sprintf("%s, %d node(s)", name, e.Nodes)
}

// PlotSeries turns results into lines: one per metric and server, with
// points sorted by X. A workload a result lacks, or that failed, gives no
// point.
func PlotSeries(spec PlotSpec, results []*Result) ([]Series, error) {
	if spec.X == "" || len(spec.Y) == 0 {
		return nil, fmt.Errorf("%w: need an x flag and at least one y metric", ErrPlot)
	}
	var out []Series
	index := map[string]int{}
	unit := ""
	for _, y := range spec.Y {
		workload, metric, ok := strings.Cut(y, ":")
		if _, known := metricValue(WorkloadResult{}, metric); !ok || !known {
			return nil, fmt.Errorf("%w: y %q: want WORKLOAD:METRIC, METRIC one of ops, p50, p90, p99, cpu", ErrPlot, y)
		}
		if u := metricUnit(metric); unit != "" && u != unit && !(strings.HasSuffix(u, " ms") && strings.HasSuffix(unit, " ms")) {
			// One y axis has one unit: ops/s and milliseconds on it would
			// make one of them unreadable.
			return nil, fmt.Errorf("%w: %s and %s on one axis; make two plots", ErrPlot, unit, u)
		} else if unit == "" {
			unit = u
		}
		for _, r := range results {
			xs, ok := r.Environment.Flags[spec.X]
			if !ok {
				return nil, fmt.Errorf("%w: a result (server %s, started %s) has no flag %q", ErrPlot, r.Environment.ServerVersion, r.Environment.Start.Format("2006-01-02 15:04"), spec.X)
			}
			x, err := strconv.ParseFloat(xs, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: flag %s is %q, not a number", ErrPlot, spec.X, xs)
			}
			w, ok := r.Workload(workload)
			if !ok || w.Failed() {
				continue
			}
			v, _ := metricValue(w, metric)
			if (spec.LogX && x <= 0) || (spec.LogY && v <= 0) {
				continue
			}
			name := y + " — " + serverLabel(r)
			i, seen := index[name]
			if !seen {
				i = len(out)
				index[name] = i
				out = append(out, Series{Name: name})
			}
			out[i].Points = append(out[i].Points, Point{x, v})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no result has %s", ErrPlot, strings.Join(spec.Y, ", "))
	}
	for i := range out {
		slices.SortFunc(out[i].Points, func(a, b Point) int {
			if a.X < b.X {
				return -1
			}
			if a.X > b.X {
				return 1
			}
			return 0
		})
	}
	return out, nil
}

// The SVG's geometry, in pixels.
const (
	plotW, plotH                   = 720, 420
	marginL, marginR, marginT, mB0 = 80, 20, 40, 60
	legendLine                     = 16
)

// palette colours the lines in order.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// axis maps values onto pixels, linearly or in log10.
type axis struct {
	lo, hi   float64
	log      bool
	step     float64
	from, to float64
}

func (a axis) f(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	lo, hi := a.lo, a.hi
	if hi == lo {
		return (a.from + a.to) / 2
	}
	return a.from + (v-lo)/(hi-lo)*(a.to-a.from)
}

// ticks are the axis labels: powers of ten on a log axis, otherwise the
// multiples of the axis's step.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := math.Floor(a.lo); e <= math.Ceil(a.hi); e++ {
			out = append(out, math.Pow(10, e))
		}
		return out
	}
	for i := 0; i <= int(math.Round((a.hi-a.lo)/a.step)); i++ {
		out = append(out, a.lo+a.step*float64(i))
	}
	return out
}

// niceStep is the 1, 2 or 5 times a power of ten that cuts span into at
// most about five steps.
func niceStep(span float64) float64 {
	raw := span / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// newAxis spans vs (from 0 on a linear axis, so that ratios read true, up
// to a whole step), mapped onto [from, to].
func newAxis(vs []float64, log bool, from, to float64) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if log {
			v = math.Log10(v)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if log {
		lo, hi = math.Floor(lo), math.Ceil(hi)
		if hi == lo {
			hi = lo + 1
		}
		return axis{lo: lo, hi: hi, log: true, from: from, to: to}
	}
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep(hi - lo)
	lo = math.Floor(lo/step) * step
	hi = math.Ceil(hi/step) * step
	return axis{lo: lo, hi: hi, step: step, from: from, to: to}
}

// WriteSVG draws series as a line chart with axes, ticks and a legend. It
// depends on nothing but the figures, so a plot regenerates byte for byte.
func WriteSVG(w io.Writer, spec PlotSpec, series []Series) error {
	var xs, ys []float64
	for _, s := range series {
		for _, p := range s.Points {
			xs, ys = append(xs, p.X), append(ys, p.Y)
		}
	}
	if len(xs) == 0 {
		return fmt.Errorf("%w: no points", ErrPlot)
	}
	marginB := mB0 + legendLine*len(series)
	height := plotH + legendLine*len(series)
	x := newAxis(xs, spec.LogX, marginL, plotW-marginR)
	y := newAxis(ys, spec.LogY, float64(height-marginB), marginT)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotW, height, plotW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", marginL, html.EscapeString(spec.Title))
	bottom, top := float64(height-marginB), float64(marginT)
	for _, t := range x.ticks() {
		px := x.f(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px, top, px, bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, bottom+16, tickLabel(t))
	}
	for _, t := range y.ticks() {
		py := y.f(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, py, plotW-marginR, py)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL-6, py+4, tickLabel(t))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", marginL, bottom, plotW-marginR, bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", marginL, top, marginL, bottom)
	fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="middle">%s</text>`+"\n", (marginL+plotW-marginR)/2, bottom+34, html.EscapeString(spec.X+scaleNote(spec.LogX)))
	units := map[string]bool{}
	for _, s := range spec.Y {
		_, m, _ := strings.Cut(s, ":")
		units[metricUnit(m)] = true
	}
	yLabel := strings.Join(slices.Sorted(maps.Keys(units)), ", ") + scaleNote(spec.LogY)
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+bottom)/2, html.EscapeString(yLabel))
	for i, s := range series {
		colour := palette[i%len(palette)]
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x.f(p.X), y.f(p.Y)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		for _, p := range s.Points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s = %s</title></circle>`+"\n",
				x.f(p.X), y.f(p.Y), colour, html.EscapeString(s.Name), tickLabel(p.X), strconv.FormatFloat(p.Y, 'g', 4, 64))
		}
		ly := bottom + 50 + float64(legendLine*i)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", marginL, ly-4, marginL+24, ly-4, colour)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", marginL+30, ly, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func scaleNote(log bool) string {
	if log {
		return " (log scale)"
	}
	return ""
}

// tickLabel writes 1000 as 1k and 1000000 as 1M; other values with up to
// three significant digits (whole numbers from 1000).
func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6 && math.Mod(v, 1e5) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3 && math.Mod(v, 100) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case a >= 1e3:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
