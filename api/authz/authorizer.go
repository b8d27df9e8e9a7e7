package authz

import (
	"context"
	"errors"

	"github.com/trustplane/trustplane/api/registry"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	kapihelper "k8s.io/kubernetes/pkg/apis/core/helper"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacv1helpers "k8s.io/kubernetes/pkg/apis/rbac/v1"
	rbacregistry "k8s.io/kubernetes/pkg/registry/rbac"
	rbacvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
	rbacauthorizer "k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

// Authorizer is kube-apiserver's authorizer for an RBAC-only cluster: the
// group system:masters may do anything, everyone else gets what RBAC
// grants. It also resolves a user's rules (SelfSubjectRulesReview) and
// checks RBAC writes for escalation.
type Authorizer struct {
	authorizer.Authorizer
	authorizer.RuleResolver

	// rules resolves the rules a user holds, for the escalation checks.
	rules rbacvalidation.AuthorizationRuleResolver
}

// New builds the Authorizer over the cache.
func New(c *Cache) *Authorizer {
	rbacAuthz := rbacauthorizer.New(c, c, c, c)
	return &Authorizer{
		// kube-apiserver puts the privileged group first, then the
		// configured modes; rule resolution has no privileged entry.
		Authorizer:   union.New(privilegedGroup(user.SystemPrivilegedGroup), rbacAuthz),
		RuleResolver: union.NewRuleResolvers(rbacAuthz),
		rules:        rbacvalidation.NewDefaultRuleResolver(c, c, c, c),
	}
}

// privilegedGroup is authorizerfactory.NewPrivilegedGroups for one group,
// with the same decisions and reasons. kube's package is not imported
// because it drags in the webhook authorizer and with it CEL.
type privilegedGroup string

func (g privilegedGroup) Authorize(_ context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	if attr.GetUser() == nil {
		return authorizer.DecisionNoOpinion, "Error", errors.New("no user on request.")
	}
	for _, have := range attr.GetUser().GetGroups() {
		if have == string(g) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// fullAuthority is what setting an aggregationRule requires (kube's
// clusterrole policybased storage).
var fullAuthority = []rbac.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// For is authorisation's part of the registry's admission chain
// (registry.Admission): the escalation check of each RBAC resource, so
// that nobody grants through a Role or binding what they do not hold.
func (a *Authorizer) For(gvr schema.GroupVersionResource, _ schema.GroupVersionKind) []registry.AdmitFunc {
	switch gvr {
	case registry.RolesGVR:
		return []registry.AdmitFunc{a.AdmitRole}
	case registry.ClusterRolesGVR:
		return []registry.AdmitFunc{a.AdmitClusterRole}
	case registry.RoleBindingsGVR:
		return []registry.AdmitFunc{a.AdmitRoleBinding}
	case registry.ClusterRoleBindingsGVR:
		return []registry.AdmitFunc{a.AdmitClusterRoleBinding}
	}
	return nil
}

// AdmitRole is kube's escalation check for Role writes (pkg/registry/rbac/
// role/policybased): the writer must hold every rule of the role, or may
// escalate roles, or is in system:masters. It is the Role store's step of
// the admission chain (For).
func (a *Authorizer) AdmitRole(ctx context.Context, obj, old runtime.Object) error {
	if rbacregistry.EscalationAllowed(ctx) || rbacregistry.RoleEscalationAuthorized(ctx, a) {
		return nil
	}
	if old != nil && rbacregistry.IsOnlyMutatingGCFields(obj, old, kapihelper.Semantic) {
		return nil
	}
	role := obj.(*rbac.Role)
	if err := rbacvalidation.ConfirmNoEscalationInternal(ctx, a.rules, role.Rules); err != nil {
		return apierrors.NewForbidden(rbac.Resource("roles"), role.Name, err)
	}
	return nil
}

// AdmitClusterRole is kube's escalation check for ClusterRole writes
// (pkg/registry/rbac/clusterrole/policybased), including the rule that
// only a full-authority user may set or change an aggregationRule.
func (a *Authorizer) AdmitClusterRole(ctx context.Context, obj, old runtime.Object) error {
	if rbacregistry.EscalationAllowed(ctx) || rbacregistry.RoleEscalationAuthorized(ctx, a) {
		return nil
	}
	if old != nil && rbacregistry.IsOnlyMutatingGCFields(obj, old, kapihelper.Semantic) {
		return nil
	}
	cr := obj.(*rbac.ClusterRole)
	gr := rbac.Resource("clusterroles")
	if err := rbacvalidation.ConfirmNoEscalationInternal(ctx, a.rules, cr.Rules); err != nil {
		return apierrors.NewForbidden(gr, cr.Name, err)
	}
	aggregating := hasAggregationRule(cr)
	if o, ok := old.(*rbac.ClusterRole); ok && hasAggregationRule(o) {
		aggregating = true
	}
	if aggregating {
		if err := rbacvalidation.ConfirmNoEscalationInternal(ctx, a.rules, fullAuthority); err != nil {
			return apierrors.NewForbidden(gr, cr.Name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
		}
	}
	return nil
}

func hasAggregationRule(cr *rbac.ClusterRole) bool {
	return cr.AggregationRule != nil && len(cr.AggregationRule.ClusterRoleSelectors) > 0
}

// AdmitRoleBinding is kube's check for RoleBinding writes (pkg/registry/
// rbac/rolebinding/policybased): the writer may bind the referenced role,
// or already holds all of its rules in the binding's namespace.
func (a *Authorizer) AdmitRoleBinding(ctx context.Context, obj, old runtime.Object) error {
	namespace, ok := genericapirequest.NamespaceFrom(ctx)
	if !ok {
		return apierrors.NewBadRequest("namespace is required")
	}
	b := obj.(*rbac.RoleBinding)
	return a.admitBinding(ctx, obj, old, rbac.Resource("rolebindings"), b.Name, b.RoleRef, namespace)
}

// AdmitClusterRoleBinding is kube's check for ClusterRoleBinding writes
// (pkg/registry/rbac/clusterrolebinding/policybased).
func (a *Authorizer) AdmitClusterRoleBinding(ctx context.Context, obj, old runtime.Object) error {
	b := obj.(*rbac.ClusterRoleBinding)
	return a.admitBinding(ctx, obj, old, rbac.Resource("clusterrolebindings"), b.Name, b.RoleRef, "")
}

func (a *Authorizer) admitBinding(ctx context.Context, obj, old runtime.Object, gr schema.GroupResource, name string, ref rbac.RoleRef, namespace string) error {
	if rbacregistry.EscalationAllowed(ctx) {
		return nil
	}
	if old != nil && rbacregistry.IsOnlyMutatingGCFields(obj, old, kapihelper.Semantic) {
		return nil
	}
	if rbacregistry.BindingAuthorized(ctx, ref, namespace, a) {
		return nil
	}
	var v1Ref rbacv1.RoleRef
	if err := rbacv1helpers.Convert_rbac_RoleRef_To_v1_RoleRef(&ref, &v1Ref, nil); err != nil {
		return err
	}
	rules, err := a.rules.GetRoleReferenceRules(ctx, v1Ref, namespace)
	if err != nil {
		return err
	}
	if err := rbacvalidation.ConfirmNoEscalation(ctx, a.rules, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return nil
}
