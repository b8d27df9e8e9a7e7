package main

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/api/registry"
)

// TestAdmissionExempt: the writes that skip admission policies and
// webhooks are the server's own and the controllers' lease written by a
// node's component, not that lease written by anyone else, whatever their
// name, nor any other object a component writes.
func TestAdmissionExempt(t *testing.T) {
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if !exempt(context.Background(), configMaps, &corev1.ConfigMap{}) {
		t.Fatal("the server's own write is not exempt")
	}
	kcm := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: controllers.KubeControllerManagerUser})
	if exempt(kcm, registry.LeasesGVR, lease(controllers.LeaseNamespace, controllers.LeaseName)) {
		t.Fatal("the controllers' lease written by kube-controller-manager's name alone is exempt")
	}
	for _, tc := range []struct {
		name      string
		component bool
		gvr       schema.GroupVersionResource
		obj       runtime.Object
		want      bool
	}{
		{"the controllers' lease by a component", true, registry.LeasesGVR, lease(controllers.LeaseNamespace, controllers.LeaseName), true},
		{"the controllers' lease by anyone else", false, registry.LeasesGVR, lease(controllers.LeaseNamespace, controllers.LeaseName), false},
		{"another lease by a component", true, registry.LeasesGVR, lease(controllers.LeaseNamespace, "other"), false},
		{"the lease's name in another namespace", true, registry.LeasesGVR, lease("default", controllers.LeaseName), false},
		{"a ConfigMap of the lease's name by a component", true, configMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: controllers.LeaseNamespace, Name: controllers.LeaseName}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseExempt(tc.component, tc.gvr, tc.obj); got != tc.want {
				t.Fatalf("leaseExempt = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLeaseRefusal: on a node that runs the controllers their lease is
// written by the nodes' components and system:masters only; a certificate
// named kube-controller-manager, which a kube-apiserver-client approver
// can give anyone, is refused with 403, and other leases are RBAC's.
func TestLeaseRefusal(t *testing.T) {
	kcm := &user.DefaultInfo{Name: controllers.KubeControllerManagerUser, Groups: []string{user.AllAuthenticated}}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	theLease := lease(controllers.LeaseNamespace, controllers.LeaseName)
	for _, tc := range []struct {
		name      string
		who       user.Info
		component bool
		obj       runtime.Object
		refused   bool
	}{
		{"a node's component", kcm, true, theLease, false},
		{"kube-controller-manager's name on another credential", kcm, false, theLease, true},
		{"system:masters", admin, false, theLease, false},
		{"the server's own write", nil, false, theLease, false},
		{"another lease by kube-controller-manager's name", kcm, false, lease(controllers.LeaseNamespace, "kube-scheduler"), false},
		{"the lease's name in another namespace", kcm, false, lease("default", controllers.LeaseName), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := leaseRefusal(tc.who, tc.component, registry.LeasesGVR, tc.obj)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			want := `leases.coordination.k8s.io "kube-controller-manager" is forbidden: ` + errLeaseReserved.Error()
			if !apierrors.IsForbidden(err) || err.Error() != want {
				t.Fatalf("err = %v, want 403 %q", err, want)
			}
		})
	}
	// Only the leases get the step.
	if v, d := leaseReserve(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); v != nil || d != nil {
		t.Fatal("a ConfigMap has the lease's reservation")
	}
}

func lease(ns, name string) runtime.Object {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
