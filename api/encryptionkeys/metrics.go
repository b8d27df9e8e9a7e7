package encryptionkeys

import "github.com/prometheus/client_golang/prometheus"

var descStale = prometheus.NewDesc("trustplane_encryption_rewrite_stale_values",
	"Stored values the leader's last rewrite pass found sealed with another key than a write would seal them with now (0 once the rewrite is done); reported by the leader only.",
	nil, nil)

// Collector reports trustplane_encryption_rewrite_stale_values, the count
// status shows as progress, as the leader's last pass left it.
func (s *Store) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Store }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- descStale }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	if n := c.s.stale.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, float64(n))
	}
}
