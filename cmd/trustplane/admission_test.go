package main

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/api/registry"
)

// TestAdmissionExempt: the writes that skip admission policies and
// webhooks are the server's own and the controllers' lease written as
// kube-controller-manager, nothing else of that user's and nobody else's
// write of that lease.
func TestAdmissionExempt(t *testing.T) {
	kcm := &user.DefaultInfo{Name: controllers.KubeControllerManagerUser}
	lease := func(ns, name string) runtime.Object {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		who  user.Info
		gvr  schema.GroupVersionResource
		obj  runtime.Object
		want bool
	}{
		{"the server's own write", nil, configMaps, &corev1.ConfigMap{}, true},
		{"the controllers' lease by kube-controller-manager", kcm, registry.LeasesGVR, lease(controllers.LeaseNamespace, controllers.LeaseName), true},
		{"another lease by kube-controller-manager", kcm, registry.LeasesGVR, lease(controllers.LeaseNamespace, "other"), false},
		{"the lease's name in another namespace", kcm, registry.LeasesGVR, lease("default", controllers.LeaseName), false},
		{"a ConfigMap of the lease's name by kube-controller-manager", kcm, configMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: controllers.LeaseNamespace, Name: controllers.LeaseName}}, false},
		{"the controllers' lease by someone else", &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}, registry.LeasesGVR, lease(controllers.LeaseNamespace, controllers.LeaseName), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.who != nil {
				ctx = genericapirequest.WithUser(ctx, tc.who)
			}
			if got := exempt(ctx, tc.gvr, tc.obj); got != tc.want {
				t.Fatalf("exempt = %v, want %v", got, tc.want)
			}
		})
	}
}
