package connlimit

import "github.com/prometheus/client_golang/prometheus"

// The figures Collector reports.
var (
	descDropped = prometheus.NewDesc("trustplane_connections_dropped_total",
		"Connections closed before they proved themselves (the pending-connection limits), by listener (api, raft, gossip) and reason: evicted (the table was full; the oldest made room), source_share (its source held its whole share; its own oldest made room), first_byte_timeout, timeout (the TLS handshake took too long), rejected (what it sent was refused: a failed TLS handshake, a gossip length over its bound, a foreign gossip label).",
		[]string{"listener", "reason"}, nil)
	descPending = prometheus.NewDesc("trustplane_connections_pending",
		"Connections in the pending table now: accepted, not yet past their TLS handshake and first request (api) or first byte (raft), or inbound gossip streams being served (gossip).",
		[]string{"listener"}, nil)
)

// Collector reports the limiters that limiters returns at each scrape
// (nil entries are skipped), so a limiter created after registration is
// still reported. It is an unchecked collector (it describes nothing), so
// that several of them, each over its own limiters, can share one
// registry; the limiters' names must differ.
func Collector(limiters func() []*Limiter) prometheus.Collector {
	return collector(limiters)
}

type collector func() []*Limiter

func (collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c() {
		if l == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(l.Pending()), l.name)
		for _, r := range Reasons() {
			ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(l.Dropped(r)), l.name, r.String())
		}
	}
}
