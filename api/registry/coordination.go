package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/apis/coordination"
	"k8s.io/kubernetes/pkg/registry/coordination/lease"
)

// LeasesGVR is coordination.k8s.io/v1 leases, which client-go's leader
// election (resourcelock.LeaseLock) holds.
var LeasesGVR = schema.GroupVersionResource{Group: coordination.GroupName, Version: "v1", Resource: "leases"}

// LeaseResources returns Leases as kube-apiserver serves them: namespaced,
// kube's strategy (validation of holderIdentity, durations and the
// preferred holder; create-on-update, as client-go's lock may update a
// lease that is gone), object-metadata selectors and kube's printer.
// A lease is an ordinary replicated object: its renewals are writes
// through the log, so a holder's claim survives a node's loss as any
// acknowledged write does.
func LeaseResources() []*Resource {
	return []*Resource{{
		GVR: LeasesGVR, KindName: "Lease", Singular: "lease", Namespaced: true,
		NewFunc:        func() runtime.Object { return &coordination.Lease{} },
		NewListFunc:    func() runtime.Object { return &coordination.LeaseList{} },
		CreateStrategy: lease.Strategy, UpdateStrategy: lease.Strategy, DeleteStrategy: lease.Strategy,
		GetAttrs:       storage.DefaultNamespaceScopedAttr,
		TableConvertor: coreTable,
	}}
}
