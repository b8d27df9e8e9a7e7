package main

import (
	"testing"
	"time"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/cluster"
)

func TestLimitFlags(t *testing.T) {
	t.Run("defaults are kube-apiserver's and etcd's", func(t *testing.T) {
		o, err := parseServe(nil)
		if err != nil {
			t.Fatal(err)
		}
		l := o.limits
		if l.maxRequestsInFlight != 400 || l.maxMutatingRequestsInFlight != 200 || l.requestTimeout != time.Minute ||
			l.maxObjectBytes != 1572864 {
			t.Fatalf("defaults %+v", l)
		}
	})
	t.Run("byte flags take quantities", func(t *testing.T) {
		o, err := parseServe([]string{"--max-object-bytes", "64Ki", "--watch-cache-max-bytes", "1Gi", "--compact-max-bytes", "-1"})
		if err != nil {
			t.Fatal(err)
		}
		if o.limits.maxObjectBytes != 64<<10 || o.limits.watchCacheMaxBytes != 1<<30 || o.limits.compactMaxBytes != -1 {
			t.Fatalf("parsed %+v", o.limits)
		}
	})
	t.Run("every limit has an environment twin", func(t *testing.T) {
		t.Setenv("TRUSTPLANE_MAX_MUTATING_REQUESTS_INFLIGHT", "7")
		t.Setenv("TRUSTPLANE_MAX_OBJECT_BYTES", "1Mi")
		o, err := parseServe(nil)
		if err != nil {
			t.Fatal(err)
		}
		if o.limits.maxMutatingRequestsInFlight != 7 || o.limits.maxObjectBytes != 1<<20 {
			t.Fatalf("parsed %+v", o.limits)
		}
	})
	t.Run("connection limits reach the api and cluster configs", func(t *testing.T) {
		t.Setenv("TRUSTPLANE_GOSSIP_LABEL", "send")
		o, err := parseServe([]string{"--max-pending-connections", "16", "--max-pending-connections-per-source", "4", "--first-byte-timeout", "1s"})
		if err != nil {
			t.Fatal(err)
		}
		a, c := api.DefaultConfig(), cluster.DefaultConfig()
		o.limits.setAPI(a)
		o.limits.setCluster(c)
		if a.MaxPendingConnections != 16 || a.MaxPendingConnectionsPerSource != 4 || a.FirstByteTimeout != time.Second ||
			c.FirstByteTimeout != time.Second || c.GossipLabel != cluster.GossipLabelSend {
			t.Fatalf("api %+v, cluster first byte %s label %q", a, c.FirstByteTimeout, c.GossipLabel)
		}
	})
	t.Run("connection limit defaults", func(t *testing.T) {
		d, err := parseServe(nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.limits.firstByteTimeout != 2*time.Second || d.limits.gossipLabel != "accept" || d.limits.maxPendingPerSource != 0 {
			t.Fatalf("defaults %+v", d.limits)
		}
	})
	for _, bad := range [][]string{
		{"--max-requests-inflight", "-1"},
		{"--max-object-bytes", "lots"},
		{"--tls-handshake-timeout", "0s"},
		{"--compact-max-bytes", "0"},
		{"--first-byte-timeout", "0s"},
		{"--first-byte-timeout", "11s"},
		{"--max-pending-connections-per-source", "-1"},
		{"--gossip-label", "sometimes"},
	} {
		t.Run("refuses "+bad[0]+" "+bad[1], func(t *testing.T) {
			if _, err := parseServe(bad); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
