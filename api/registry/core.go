package registry

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/warning"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	printerstorage "k8s.io/kubernetes/pkg/printers/storage"
	"k8s.io/kubernetes/pkg/registry/core/configmap"
	"k8s.io/kubernetes/pkg/registry/core/namespace"
	"k8s.io/kubernetes/pkg/registry/core/pod"
	"k8s.io/kubernetes/pkg/registry/core/podtemplate"
	"k8s.io/kubernetes/pkg/registry/core/secret"
	"k8s.io/kubernetes/pkg/registry/core/service"
	"k8s.io/kubernetes/pkg/registry/core/serviceaccount"
)

// coreTable prints like kube-apiserver, with kube's own column definitions.
var coreTable = printerstorage.TableConvertor{TableGenerator: printers.NewTableGenerator().With(printersinternal.AddHandlers)}

// CoreResources returns the resources of the core group served by this issue's
// foundation. Strategies, printers and selectable fields are kube's own.
func CoreResources() []*Resource {
	v1 := func(resource string) (g, v, r string) { return "", "v1", resource }
	gvr := func(g, v, r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
	}
	return []*Resource{
		{
			GVR: gvr(v1("namespaces")), KindName: "Namespace", Singular: "namespace", ShortNames: []string{"ns"},
			NewFunc: func() runtime.Object { return &api.Namespace{} }, NewListFunc: func() runtime.Object { return &api.NamespaceList{} },
			CreateStrategy: namespace.Strategy, UpdateStrategy: namespace.Strategy, DeleteStrategy: namespace.Strategy,
			// The namespace controller removes its kubernetes finalizer
			// through finalize, which kube routes for update only.
			Subresources:           map[string]rest.RESTUpdateStrategy{"status": namespace.StatusStrategy, "finalize": namespace.FinalizeStrategy},
			SubresourceVerbs:       map[string][]string{"finalize": {"update"}},
			OwnDeletePreconditions: true,
			ReturnDeletedObject:    true,
			Finalizers: func(obj runtime.Object) []string {
				var out []string
				for _, f := range obj.(*api.Namespace).Spec.Finalizers {
					out = append(out, string(f))
				}
				return out
			},
			// kube's namespace REST serves no deletecollection, and its
			// delete sets only the deletionTimestamp and the Terminating
			// phase (no deletion grace period).
			NoDeleteCollection: true,
			OnDeleting: func(obj runtime.Object) {
				ns := obj.(*api.Namespace)
				ns.Status.Phase = api.NamespaceTerminating
				ns.DeletionGracePeriodSeconds = nil
			},
			AdmitDelete:    keepSystemNamespaces,
			GetAttrs:       namespace.GetAttrs,
			TableConvertor: coreTable,
		},
		{
			GVR: gvr(v1("serviceaccounts")), KindName: "ServiceAccount", Singular: "serviceaccount", ShortNames: []string{"sa"}, Namespaced: true,
			NewFunc: func() runtime.Object { return &api.ServiceAccount{} }, NewListFunc: func() runtime.Object { return &api.ServiceAccountList{} },
			CreateStrategy: serviceaccount.Strategy, UpdateStrategy: serviceaccount.Strategy, DeleteStrategy: serviceaccount.Strategy,
			ReturnDeletedObject: true,
			GetAttrs:            storage.DefaultNamespaceScopedAttr,
			TableConvertor:      coreTable,
		},
		{
			GVR: gvr(v1("secrets")), KindName: "Secret", Singular: "secret", Namespaced: true,
			NewFunc: func() runtime.Object { return &api.Secret{} }, NewListFunc: func() runtime.Object { return &api.SecretList{} },
			CreateStrategy: secret.Strategy, UpdateStrategy: secret.Strategy, DeleteStrategy: secret.Strategy,
			Admit:          warnLegacyTokenSecret,
			GetAttrs:       secret.GetAttrs,
			TableConvertor: coreTable,
		},
		{
			GVR: gvr(v1("configmaps")), KindName: "ConfigMap", Singular: "configmap", ShortNames: []string{"cm"}, Namespaced: true,
			NewFunc: func() runtime.Object { return &api.ConfigMap{} }, NewListFunc: func() runtime.Object { return &api.ConfigMapList{} },
			CreateStrategy: configmap.Strategy, UpdateStrategy: configmap.Strategy, DeleteStrategy: configmap.Strategy,
			GetAttrs:       configmap.GetAttrs,
			TableConvertor: coreTable,
		},
		{
			GVR: gvr(v1("pods")), KindName: "Pod", Singular: "pod", ShortNames: []string{"po"}, Categories: []string{"all"}, Namespaced: true,
			NewFunc: func() runtime.Object { return &api.Pod{} }, NewListFunc: func() runtime.Object { return &api.PodList{} },
			CreateStrategy: pod.Strategy, UpdateStrategy: pod.Strategy, DeleteStrategy: pod.Strategy,
			Subresources:        map[string]rest.RESTUpdateStrategy{"status": pod.StatusStrategy},
			ReturnDeletedObject: true,
			GetAttrs:            pod.GetAttrs,
			TableConvertor:      coreTable,
		},
		{
			GVR: gvr(v1("podtemplates")), KindName: "PodTemplate", Singular: "podtemplate", Namespaced: true,
			NewFunc: func() runtime.Object { return &api.PodTemplate{} }, NewListFunc: func() runtime.Object { return &api.PodTemplateList{} },
			CreateStrategy: podtemplate.Strategy, UpdateStrategy: podtemplate.Strategy, DeleteStrategy: podtemplate.Strategy,
			ReturnDeletedObject: true,
			GetAttrs:            storage.DefaultNamespaceScopedAttr,
			TableConvertor:      coreTable,
		},
		{
			// Services are read-only here: the server keeps default/kubernetes.
			GVR: gvr(v1("services")), KindName: "Service", Singular: "service", ShortNames: []string{"svc"}, Categories: []string{"all"}, Namespaced: true,
			NewFunc: func() runtime.Object { return &api.Service{} }, NewListFunc: func() runtime.Object { return &api.ServiceList{} },
			CreateStrategy: service.Strategy, UpdateStrategy: service.Strategy,
			ReadOnly:       true,
			GetAttrs:       service.GetAttrs,
			TableConvertor: coreTable,
		},
	}
}

// systemNamespaces are kube's immortal namespaces: the NamespaceLifecycle
// admission refuses to delete them, so the namespace controller never
// empties them.
var systemNamespaces = sets.New(metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic)

func keepSystemNamespaces(_ context.Context, name string) error {
	if systemNamespaces.Has(name) {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, name, errors.New("this namespace may not be deleted"))
	}
	return nil
}

// legacyTokenWarning is sent when a kubernetes.io/service-account-token
// Secret is created: the tokens controller fills it with a token that never
// expires. kube-apiserver only warns when such a token is used.
const legacyTokenWarning = "kubernetes.io/service-account-token Secrets hold legacy tokens that never expire; prefer the TokenRequest API (kubectl create token)"

func warnLegacyTokenSecret(ctx context.Context, obj, old runtime.Object) error {
	if s, ok := obj.(*api.Secret); ok && old == nil && s.Type == api.SecretTypeServiceAccountToken {
		warning.AddWarning(ctx, "", legacyTokenWarning)
	}
	return nil
}
