package main

import (
	"github.com/prometheus/client_golang/prometheus"

	// The controllers' client-go workqueues report into kube's registry
	// (workqueue_depth, workqueue_adds_total, ... by queue name), as in
	// kube-controller-manager; the api serves that registry at /metrics.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
	// Their API clients report rest_client_* (requests by code and method,
	// latency, rate limiter waits), as kube-controller-manager's do.
	_ "k8s.io/component-base/metrics/prometheus/restclient"

	"github.com/trustplane/trustplane/cluster"
)

// nodeCollectors are the metrics only this node can report, served at
// /metrics beside kube's registry: its raft figures, and its raft and
// gossip ports' pending-connection tables.
func nodeCollectors(node *cluster.Node) []prometheus.Collector {
	return []prometheus.Collector{node.Collector(), node.ConnCollector()}
}
