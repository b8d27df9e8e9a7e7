package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/apis/rbac"
	"k8s.io/kubernetes/pkg/registry/rbac/clusterrole"
	"k8s.io/kubernetes/pkg/registry/rbac/clusterrolebinding"
	"k8s.io/kubernetes/pkg/registry/rbac/role"
	"k8s.io/kubernetes/pkg/registry/rbac/rolebinding"
)

// RBACGroupVersion is the served version of the RBAC group.
var RBACGroupVersion = schema.GroupVersion{Group: rbac.GroupName, Version: "v1"}

// RBAC resources, by name.
var (
	RolesGVR               = RBACGroupVersion.WithResource("roles")
	ClusterRolesGVR        = RBACGroupVersion.WithResource("clusterroles")
	RoleBindingsGVR        = RBACGroupVersion.WithResource("rolebindings")
	ClusterRoleBindingsGVR = RBACGroupVersion.WithResource("clusterrolebindings")
)

// RBACResources returns Role, ClusterRole, RoleBinding and ClusterRoleBinding
// of rbac.authorization.k8s.io/v1 with kube's strategies and table columns.
// kube serves them without short names or categories. Their escalation
// checks (the bind and escalate verbs) are steps of the admission chain
// given by whoever owns the authorizer (api/authz), because they need it.
func RBACResources() []*Resource {
	return []*Resource{
		{
			GVR: RolesGVR, KindName: "Role", Singular: "role", Namespaced: true,
			NewFunc: func() runtime.Object { return &rbac.Role{} }, NewListFunc: func() runtime.Object { return &rbac.RoleList{} },
			CreateStrategy: role.Strategy, UpdateStrategy: role.Strategy, DeleteStrategy: role.Strategy,
			GetAttrs: storage.DefaultNamespaceScopedAttr,
			// kube prints roles with its default columns (name, created at).
			TableConvertor: rest.NewDefaultTableConvertor(rbac.Resource("roles")),
		},
		{
			GVR: ClusterRolesGVR, KindName: "ClusterRole", Singular: "clusterrole",
			NewFunc: func() runtime.Object { return &rbac.ClusterRole{} }, NewListFunc: func() runtime.Object { return &rbac.ClusterRoleList{} },
			CreateStrategy: clusterrole.Strategy, UpdateStrategy: clusterrole.Strategy, DeleteStrategy: clusterrole.Strategy,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: rest.NewDefaultTableConvertor(rbac.Resource("clusterroles")),
		},
		{
			GVR: RoleBindingsGVR, KindName: "RoleBinding", Singular: "rolebinding", Namespaced: true,
			NewFunc: func() runtime.Object { return &rbac.RoleBinding{} }, NewListFunc: func() runtime.Object { return &rbac.RoleBindingList{} },
			CreateStrategy: rolebinding.Strategy, UpdateStrategy: rolebinding.Strategy, DeleteStrategy: rolebinding.Strategy,
			GetAttrs:       storage.DefaultNamespaceScopedAttr,
			TableConvertor: coreTable,
		},
		{
			GVR: ClusterRoleBindingsGVR, KindName: "ClusterRoleBinding", Singular: "clusterrolebinding",
			NewFunc: func() runtime.Object { return &rbac.ClusterRoleBinding{} }, NewListFunc: func() runtime.Object { return &rbac.ClusterRoleBindingList{} },
			CreateStrategy: clusterrolebinding.Strategy, UpdateStrategy: clusterrolebinding.Strategy, DeleteStrategy: clusterrolebinding.Strategy,
			GetAttrs:       storage.DefaultClusterScopedAttr,
			TableConvertor: coreTable,
		},
	}
}
