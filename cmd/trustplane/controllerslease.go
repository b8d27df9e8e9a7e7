package main

import (
	"context"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/api/registry"
)

// The controllers' lease (kube-system/kube-controller-manager) decides
// which node runs the controllers for every node (api/controllers.Host),
// so whoever holds it stops them everywhere. The rules for writing it
// live here:
//
//   - A node's own component writes it past the admission policies and
//     webhooks users configure (leaseExempt), so that no policy can
//     refuse the renewals.
//   - On a node that runs the controllers (--controllers), nobody else
//     writes it but system:masters (leaseRefusal): the ClusterRole
//     system:kube-controller-manager lets its user update the lease, and
//     a kube-apiserver-client approver can give anyone a certificate of
//     that name. kube-apiserver lets such a certificate hold the lease;
//     trustplane runs its controllers itself, so no outside
//     kube-controller-manager has a use for it. With --controllers=false
//     an outside kube-controller-manager does hold it, and the lease is
//     RBAC's alone, as in kube.
//
// A component is known by its credential (api.FromComponent: a
// certificate of a node's loopback CA), never by its name.

// errLeaseReserved is why a write of the controllers' lease is refused.
var errLeaseReserved = errors.New("the controllers' lease is held by trustplane's nodes, which run the controllers themselves (--controllers); only their own components and system:masters may write it")

// controllersLease reports whether obj, of resource gvr, is the
// controllers' lease.
func controllersLease(gvr schema.GroupVersionResource, obj runtime.Object) bool {
	if gvr.GroupResource() != registry.LeasesGVR.GroupResource() {
		return false
	}
	m, err := meta.Accessor(obj)
	return err == nil && m.GetNamespace() == controllers.LeaseNamespace && m.GetName() == controllers.LeaseName
}

// leaseExempt reports whether a write of obj by a caller, a node's
// component or not, skips the admission policies and webhooks: the
// controllers' lease written by a component.
func leaseExempt(component bool, gvr schema.GroupVersionResource, obj runtime.Object) bool {
	return component && controllersLease(gvr, obj)
}

// leaseRefusal is the refusal of a write of obj by u, a node's component
// or not, on a node that runs the controllers; nil when it may go on.
// A write without a user is the server's own.
func leaseRefusal(u user.Info, component bool, gvr schema.GroupVersionResource, obj runtime.Object) error {
	if u == nil || component || !controllersLease(gvr, obj) || slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return nil
	}
	return apierrors.NewForbidden(gvr.GroupResource(), controllers.LeaseName, errLeaseReserved)
}

// leaseReserve is the validating step and the delete step that apply
// leaseRefusal to the leases.
func leaseReserve(gvr schema.GroupVersionResource) ([]registry.ValidateFunc, []registry.AdmitDeleteFunc) {
	if gvr.GroupResource() != registry.LeasesGVR.GroupResource() {
		return nil, nil
	}
	refusal := func(ctx context.Context, obj runtime.Object) error {
		u, _ := genericapirequest.UserFrom(ctx)
		return leaseRefusal(u, api.FromComponent(ctx), gvr, obj)
	}
	validate := func(ctx context.Context, obj, _ runtime.Object, _ bool) error { return refusal(ctx, obj) }
	del := func(ctx context.Context, old runtime.Object, _ *metav1.DeleteOptions, _ bool) error {
		return refusal(ctx, old)
	}
	return []registry.ValidateFunc{validate}, []registry.AdmitDeleteFunc{del}
}
