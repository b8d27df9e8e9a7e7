package rotation

import (
	"github.com/prometheus/client_golang/prometheus"
)

var descKeys = prometheus.NewDesc("trustplane_trust_root_keys",
	"Keys of each trust root by phase (pending, active, retiring), as this node has applied them.",
	[]string{"root", "phase"}, nil)

// Counter counts a root's keys by phase on this node.
type Counter func() (map[Phase]int, error)

// Collector reports trustplane_trust_root_keys for roots, read at scrape:
// each node reports what it has applied, so a member that lags shows
// another count than the leader.
func Collector(roots map[string]Counter) prometheus.Collector { return collector(roots) }

type collector map[string]Counter

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- descKeys }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for root, count := range c {
		counts, err := count()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descKeys, err)
			continue
		}
		for _, p := range []Phase{Pending, Active, Retiring} {
			ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(counts[p]), root, string(p))
		}
	}
}
