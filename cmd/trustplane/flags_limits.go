package main

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/api/webhookclient"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/watchcache"
)

// limitFlags bound what clients and peers may cost a node: request counts
// and times (kube-apiserver's flags of the same names), object and history
// sizes, and connections that have not finished their TLS handshake (with
// the gossip label, the network-facing ports' protections).
type limitFlags struct {
	maxRequestsInFlight         int
	maxMutatingRequestsInFlight int
	requestTimeout              time.Duration
	maxWatches                  int
	maxWatchesPerUser           int
	maxPendingConnections       int
	maxPendingPerSource         int
	raftMaxPendingHandshakes    int
	handshakeTimeout            time.Duration
	firstByteTimeout            time.Duration
	gossipLabel                 string
	maxObjectBytes              bytesFlag
	watchCacheMaxBytes          bytesFlag
	compactMaxBytes             bytesFlag
	webhookMaxResponseBytes     bytesFlag
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	a, c, w := api.DefaultConfig(), cluster.DefaultConfig(), watchcache.DefaultConfig()
	fs.IntVar(&l.maxRequestsInFlight, "max-requests-inflight", a.MaxRequestsInFlight, "read-only requests served at once; more get 429 (0: no limit)")
	fs.IntVar(&l.maxMutatingRequestsInFlight, "max-mutating-requests-inflight", a.MaxMutatingRequestsInFlight, "mutating requests served at once; more get 429 (0: no limit)")
	fs.DurationVar(&l.requestTimeout, "request-timeout", a.RequestTimeout, "deadline of a request that is not long-running, body read included; past it 504 (0: none)")
	fs.IntVar(&l.maxWatches, "max-watches", a.MaxWatches, "watches served at once by this node, a tenth of them kept for system:masters and the node's own components; more get 429 (0: no limit)")
	fs.IntVar(&l.maxWatchesPerUser, "max-watches-per-user", a.MaxWatchesPerUser, "watches served at once by this node to one user who is not system:masters or one of the node's own components; more get 429 (0: no limit)")
	fs.IntVar(&l.maxPendingConnections, "max-pending-connections", a.MaxPendingConnections, "API connections in their TLS handshake or before their first request at once; when full, the oldest is closed to make room (0: no limit)")
	fs.IntVar(&l.maxPendingPerSource, "max-pending-connections-per-source", a.MaxPendingConnectionsPerSource, "of --max-pending-connections, the most one client address (IPv4, or IPv6 /64) holds; its own oldest is closed to make room (0: an eighth of the table)")
	fs.IntVar(&l.raftMaxPendingHandshakes, "raft-max-pending-handshakes", c.MaxPendingHandshakes, "raft-port connections in their TLS handshake at once; when full, the oldest is closed to make room (one address holds at most an eighth)")
	fs.DurationVar(&l.handshakeTimeout, "tls-handshake-timeout", a.HandshakeTimeout, "time a new API or raft connection has for its TLS handshake and first bytes")
	fs.DurationVar(&l.firstByteTimeout, "first-byte-timeout", a.FirstByteTimeout, "time a new API, raft or gossip connection has to send its first byte (the TLS ClientHello); at most --tls-handshake-timeout")
	fs.StringVar(&l.gossipLabel, "gossip-label", string(c.GossipLabel), "gossip label use: accept (send none; accept trustplane's or none), send (label what is sent; every node must accept labels first), require (refuse unlabelled; every node must send labels first)")
	l.maxObjectBytes = bytesFlag(registry.DefaultMaxObjectBytes)
	fs.Var(&l.maxObjectBytes, "max-object-bytes", "largest stored object encoding; larger writes get 413 (etcd's request limit; quantities such as 1.5Mi)")
	l.watchCacheMaxBytes = bytesFlag(w.MaxBytes)
	fs.Var(&l.watchCacheMaxBytes, "watch-cache-max-bytes", "bytes of events each node's watch window keeps; older events are dropped first (410 Gone)")
	l.compactMaxBytes = bytesFlag(c.CompactMaxBytes)
	fs.Var(&l.compactMaxBytes, "compact-max-bytes", "bytes of MVCC history kept; past it the leader compacts whatever --compact-retention says (negative: no byte bound)")
	l.webhookMaxResponseBytes = bytesFlag(webhookclient.DefaultMaxResponseBytes)
	fs.Var(&l.webhookMaxResponseBytes, "admission-webhook-max-response-bytes", "largest answer an admission or conversion webhook may give; a longer one fails the call (an admission webhook's failurePolicy then decides); a conversion webhook's answer holds the object it converts, so keep it above --max-object-bytes")
}

func (l *limitFlags) validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"--max-requests-inflight", int64(l.maxRequestsInFlight)},
		{"--max-mutating-requests-inflight", int64(l.maxMutatingRequestsInFlight)},
		{"--request-timeout", int64(l.requestTimeout)},
		{"--max-watches", int64(l.maxWatches)},
		{"--max-watches-per-user", int64(l.maxWatchesPerUser)},
		{"--max-pending-connections", int64(l.maxPendingConnections)},
		{"--max-pending-connections-per-source", int64(l.maxPendingPerSource)},
		{"--max-object-bytes", int64(l.maxObjectBytes)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative", f.name)
		}
	}
	if l.raftMaxPendingHandshakes <= 0 || l.handshakeTimeout <= 0 || l.firstByteTimeout <= 0 || l.watchCacheMaxBytes <= 0 || l.webhookMaxResponseBytes <= 0 {
		return fmt.Errorf("--raft-max-pending-handshakes, --tls-handshake-timeout, --first-byte-timeout, --watch-cache-max-bytes and --admission-webhook-max-response-bytes must be positive")
	}
	if l.firstByteTimeout > l.handshakeTimeout {
		return fmt.Errorf("--first-byte-timeout %s must not exceed --tls-handshake-timeout %s", l.firstByteTimeout, l.handshakeTimeout)
	}
	switch cluster.GossipLabelMode(l.gossipLabel) {
	case cluster.GossipLabelAccept, cluster.GossipLabelSend, cluster.GossipLabelRequire:
	default:
		return fmt.Errorf("--gossip-label %q: want %s, %s or %s", l.gossipLabel, cluster.GossipLabelAccept, cluster.GossipLabelSend, cluster.GossipLabelRequire)
	}
	if l.compactMaxBytes == 0 {
		return fmt.Errorf("--compact-max-bytes must not be 0 (negative disables the byte bound)")
	}
	return nil
}

// setAPI, setStorage, setCluster and setWatchCache copy the limits
// into the components' configs.
func (l *limitFlags) setAPI(a *api.Config) {
	a.MaxRequestsInFlight = l.maxRequestsInFlight
	a.MaxMutatingRequestsInFlight = l.maxMutatingRequestsInFlight
	a.RequestTimeout = l.requestTimeout
	a.MaxWatches = l.maxWatches
	a.MaxWatchesPerUser = l.maxWatchesPerUser
	a.MaxPendingConnections = l.maxPendingConnections
	a.MaxPendingConnectionsPerSource = l.maxPendingPerSource
	a.HandshakeTimeout = l.handshakeTimeout
	a.FirstByteTimeout = l.firstByteTimeout
}

func (l *limitFlags) setStorage(s *storage.Config) { s.MaxObjectBytes = int64(l.maxObjectBytes) }

func (l *limitFlags) setCluster(c *cluster.Config) {
	c.MaxPendingHandshakes = l.raftMaxPendingHandshakes
	c.HandshakeTimeout = l.handshakeTimeout
	c.FirstByteTimeout = l.firstByteTimeout
	c.GossipLabel = cluster.GossipLabelMode(l.gossipLabel)
	c.CompactMaxBytes = int64(l.compactMaxBytes)
}

func (l *limitFlags) setAdmission(p *plugins) {
	p.maxWebhookResponse = int64(l.webhookMaxResponseBytes)
}

func (l *limitFlags) setWatchCache(w *watchcache.Config) { w.MaxBytes = int64(l.watchCacheMaxBytes) }

// bytesFlag is a byte count given as a Kubernetes quantity (1572864, 1.5Mi,
// 512Mi, 2G).
type bytesFlag int64

func (b *bytesFlag) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *bytesFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a byte quantity (such as 1572864 or 1.5Mi): %w", s, err)
	}
	*b = bytesFlag(q.Value())
	return nil
}
