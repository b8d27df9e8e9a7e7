package authz

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacv1helpers "k8s.io/kubernetes/pkg/apis/rbac/v1"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/fsm"
)

// Store is what the bootstrap needs from a registry store. Objects are
// internal ones; the namespace comes from the context.
type Store interface {
	// Get reads the named object; with resourceVersion "0" it reads this
	// node's applied state without a read index.
	Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error)
	// Create stores a new object, filling uid and timestamps, through the
	// resource's admission and strategy.
	Create(ctx context.Context, obj runtime.Object, dryRun bool) (runtime.Object, error)
	// Update replaces the named object; a resourceVersion in the object
	// makes it conditional (a stale one is a Conflict).
	Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, dryRun bool) (runtime.Object, error)
	// Delete removes the named object, honouring opts' preconditions.
	Delete(ctx context.Context, name string, opts *metav1.DeleteOptions, dryRun bool) (runtime.Object, bool, error)
}

// Stores finds the store of a resource; *registry.Registry provides it.
type Stores interface {
	Store(gvr schema.GroupVersionResource) *registry.Store
}

// ClusterTrustBundleReader names the ClusterRole and ClusterRoleBinding
// that let every authenticated user read ClusterTrustBundles. kube ships
// the role under this name (bound to service accounts) when its
// ClusterTrustBundle feature is on; trustplane always serves the bundles
// and binds the role to system:authenticated too.
const ClusterTrustBundleReader = "system:cluster-trust-bundle-discovery"

// BootstrapMarker is the object the bootstrap writes last, after all
// others exist: a node that has applied it has applied the whole policy.
var BootstrapMarker = fsm.Key{Group: rbac.GroupName, Resource: "clusterrolebindings", Name: "cluster-admin"}

// bootstrapUser writes the policy. Like kube-apiserver's loopback client it
// is in system:masters, so the escalation checks let it through.
var bootstrapUser = &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}

// bootstrapParallelism bounds concurrent creates; the writes share fsyncs
// through raft's group commit.
const bootstrapParallelism = 16

// policyObject is one object of the bootstrap policy, in its v1 form.
type policyObject struct {
	gvr       schema.GroupVersionResource
	namespace string
	obj       runtime.Object
}

// bootstrapPolicy returns kube's bootstrap policy (cluster roles and
// bindings, controller roles and bindings, namespaced roles and bindings)
// plus the ClusterTrustBundle reader, with the marker binding last.
func bootstrapPolicy() []policyObject {
	var out []policyObject
	clusterRoles := append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...)
	bindings := append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...)

	haveReader := false
	for _, r := range clusterRoles {
		haveReader = haveReader || r.Name == ClusterTrustBundleReader
	}
	if !haveReader {
		clusterRoles = append(clusterRoles, rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterTrustBundleReader, Labels: bootstrappolicy.Label, Annotations: bootstrappolicy.Annotation},
			Rules: []rbacv1.PolicyRule{
				rbacv1helpers.NewRule(bootstrappolicy.Read...).Groups("certificates.k8s.io").Resources("clustertrustbundles").RuleOrDie(),
			},
		})
	}
	readerBound := false
	for i := range bindings {
		if bindings[i].Name == ClusterTrustBundleReader {
			bindings[i].Subjects = append(bindings[i].Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: user.AllAuthenticated})
			readerBound = true
		}
	}
	if !readerBound {
		b := rbacv1helpers.NewClusterBinding(ClusterTrustBundleReader).Groups(serviceaccount.AllServiceAccountsGroup, user.AllAuthenticated).BindingOrDie()
		b.Labels, b.Annotations = bootstrappolicy.Label, bootstrappolicy.Annotation
		bindings = append(bindings, b)
	}

	clusterRoles, bindings = withTrustBundlePublisher(clusterRoles, bindings)

	for i := range clusterRoles {
		out = append(out, policyObject{gvr: registry.ClusterRolesGVR, obj: &clusterRoles[i]})
	}
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		for i := range roles {
			out = append(out, policyObject{gvr: registry.RolesGVR, namespace: ns, obj: &roles[i]})
		}
	}
	var marker *policyObject
	for i := range bindings {
		o := policyObject{gvr: registry.ClusterRoleBindingsGVR, obj: &bindings[i]}
		if bindings[i].Name == BootstrapMarker.Name {
			marker = &o
			continue
		}
		out = append(out, o)
	}
	for ns, rbs := range bootstrappolicy.NamespaceRoleBindings() {
		for i := range rbs {
			out = append(out, policyObject{gvr: registry.RoleBindingsGVR, namespace: ns, obj: &rbs[i]})
		}
	}
	if marker != nil {
		out = append(out, *marker)
	}
	return out
}

// Bootstrap reconciles the bootstrap policy as kube-apiserver does on
// start (k8s.io/component-helpers/auth/rbac/reconciliation, as kube's
// EnsureRBACPolicy uses it): missing objects are created, and objects
// annotated rbac.authorization.kubernetes.io/autoupdate=true get missing
// rules or subjects added; nothing is ever removed, and an object annotated
// autoupdate=false is left alone. It is idempotent and writes nothing when
// the policy is in place; the leader runs it once per term, after the
// default namespaces exist. The marker is reconciled after every other
// object.
func Bootstrap(ctx context.Context, stores Stores) error {
	ctx = genericapirequest.WithUser(ctx, bootstrapUser)
	policy := bootstrapPolicy()
	last := policy[len(policy)-1]
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(bootstrapParallelism)
	for _, o := range policy[:len(policy)-1] {
		g.Go(func() error { return reconcile(gctx, stores, o) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return reconcile(ctx, stores, last)
}

// reconcile brings one policy object into the store, retrying when a
// concurrent write conflicts, as kube does.
func reconcile(ctx context.Context, stores Stores, o policyObject) error {
	st := stores.Store(o.gvr)
	if st == nil {
		return fmt.Errorf("bootstrap policy: %s is not served", o.gvr.Resource)
	}
	s := v1Store{ctx: ctx, st: st}
	var run func() error
	switch obj := o.obj.(type) {
	case *rbacv1.ClusterRole:
		opts := reconciliation.ReconcileRoleOptions{
			Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: obj}, Client: clusterRoleModifier{s}, Confirm: true}
		run = func() error { _, err := opts.Run(); return err }
	case *rbacv1.Role:
		opts := reconciliation.ReconcileRoleOptions{
			Role: reconciliation.RoleRuleOwner{Role: obj}, Client: roleModifier{s}, Confirm: true}
		run = func() error { _, err := opts.Run(); return err }
	case *rbacv1.ClusterRoleBinding:
		opts := reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj}, Client: clusterRoleBindingModifier{s}, Confirm: true}
		run = func() error { _, err := opts.Run(); return err }
	case *rbacv1.RoleBinding:
		opts := reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: obj}, Client: roleBindingModifier{s}, Confirm: true}
		run = func() error { _, err := opts.Run(); return err }
	default:
		return fmt.Errorf("bootstrap policy: unexpected %T", o.obj)
	}
	if err := retry.RetryOnConflict(retry.DefaultBackoff, run); err != nil {
		name := o.obj.(metav1.Object).GetName()
		return fmt.Errorf("bootstrap policy: reconciling %s %s/%s: %w", o.gvr.Resource, o.namespace, name, err)
	}
	return nil
}

// v1Store runs a registry store, which holds internal objects, in the v1
// objects the reconciliation works on.
type v1Store struct {
	ctx context.Context
	st  Store
}

// get reads the object from this node's applied state (resourceVersion
// "0"): a leader has every acknowledged write, and a stale read only costs
// a conflict and a retry.
func (s v1Store) get(namespace, name string, into runtime.Object) error {
	obj, err := s.st.Get(genericapirequest.WithNamespace(s.ctx, namespace), name, &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	return registry.Scheme.Convert(obj, into, nil)
}

func (s v1Store) create(namespace string, in, out runtime.Object) error {
	internal, err := registry.Scheme.ConvertToVersion(in, runtime.InternalGroupVersioner)
	if err != nil {
		return err
	}
	created, err := s.st.Create(genericapirequest.WithNamespace(s.ctx, namespace), internal, false)
	if err != nil {
		return err
	}
	return registry.Scheme.Convert(created, out, nil)
}

func (s v1Store) update(namespace string, in, out runtime.Object) error {
	internal, err := registry.Scheme.ConvertToVersion(in, runtime.InternalGroupVersioner)
	if err != nil {
		return err
	}
	name := in.(metav1.Object).GetName()
	updated, err := s.st.Update(genericapirequest.WithNamespace(s.ctx, namespace), name, rest.DefaultUpdatedObjectInfo(internal), false)
	if err != nil {
		return err
	}
	return registry.Scheme.Convert(updated, out, nil)
}

func (s v1Store) delete(namespace, name string, uid types.UID) error {
	_, _, err := s.st.Delete(genericapirequest.WithNamespace(s.ctx, namespace), name,
		&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}, false)
	return err
}

// The four modifiers are kube's reconciliation clients over the stores.
type (
	clusterRoleModifier        struct{ s v1Store }
	roleModifier               struct{ s v1Store }
	clusterRoleBindingModifier struct{ s v1Store }
	roleBindingModifier        struct{ s v1Store }
)

var (
	_ reconciliation.RuleOwnerModifier   = clusterRoleModifier{}
	_ reconciliation.RuleOwnerModifier   = roleModifier{}
	_ reconciliation.RoleBindingModifier = clusterRoleBindingModifier{}
	_ reconciliation.RoleBindingModifier = roleBindingModifier{}
)

func (m clusterRoleModifier) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	out := &rbacv1.ClusterRole{}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: out}, m.s.get(namespace, name, out)
}

func (m clusterRoleModifier) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	out := &rbacv1.ClusterRole{}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: out}, m.s.create("", in.GetObject(), out)
}

func (m clusterRoleModifier) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	out := &rbacv1.ClusterRole{}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: out}, m.s.update("", in.GetObject(), out)
}

func (m roleModifier) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	out := &rbacv1.Role{}
	return reconciliation.RoleRuleOwner{Role: out}, m.s.get(namespace, name, out)
}

func (m roleModifier) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	out := &rbacv1.Role{}
	return reconciliation.RoleRuleOwner{Role: out}, m.s.create(in.GetNamespace(), in.GetObject(), out)
}

func (m roleModifier) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	out := &rbacv1.Role{}
	return reconciliation.RoleRuleOwner{Role: out}, m.s.update(in.GetNamespace(), in.GetObject(), out)
}

func (m clusterRoleBindingModifier) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	out := &rbacv1.ClusterRoleBinding{}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: out}, m.s.get(namespace, name, out)
}

func (m clusterRoleBindingModifier) Delete(namespace, name string, uid types.UID) error {
	return m.s.delete(namespace, name, uid)
}

func (m clusterRoleBindingModifier) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	out := &rbacv1.ClusterRoleBinding{}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: out}, m.s.create("", in.GetObject(), out)
}

func (m clusterRoleBindingModifier) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	out := &rbacv1.ClusterRoleBinding{}
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: out}, m.s.update("", in.GetObject(), out)
}

func (m roleBindingModifier) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	out := &rbacv1.RoleBinding{}
	return reconciliation.RoleBindingAdapter{RoleBinding: out}, m.s.get(namespace, name, out)
}

func (m roleBindingModifier) Delete(namespace, name string, uid types.UID) error {
	return m.s.delete(namespace, name, uid)
}

func (m roleBindingModifier) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	out := &rbacv1.RoleBinding{}
	return reconciliation.RoleBindingAdapter{RoleBinding: out}, m.s.create(in.GetNamespace(), in.GetObject(), out)
}

func (m roleBindingModifier) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	out := &rbacv1.RoleBinding{}
	return reconciliation.RoleBindingAdapter{RoleBinding: out}, m.s.update(in.GetNamespace(), in.GetObject(), out)
}

// trustBundlePublisherRole is kube's role for its kube-apiserver-serving
// ClusterTrustBundle publisher (bootstrappolicy, with the
// ClusterTrustBundle feature on).
const trustBundlePublisherRole = "system:controller:kube-apiserver-serving-clustertrustbundle-publisher"

// trustBundleSigners are the signers whose ClusterTrustBundles the
// publisher keeps (api/controllers trustBundleControllers): kube's
// kube-apiserver-serving and, beyond kube, every built-in CSR signer, so
// that clients find each signer's CAs while they rotate.
var trustBundleSigners = []string{
	"kubernetes.io/kube-apiserver-serving",
	certificatesv1.KubeAPIServerClientSignerName,
	certificatesv1.KubeAPIServerClientKubeletSignerName,
	certificatesv1.KubeletServingSignerName,
}

// withTrustBundlePublisher adds kube's publisher role and binding when
// the feature gate left them out, and lets the role attest every signer
// of trustBundleSigners.
func withTrustBundlePublisher(roles []rbacv1.ClusterRole, bindings []rbacv1.ClusterRoleBinding) ([]rbacv1.ClusterRole, []rbacv1.ClusterRoleBinding) {
	attest := rbacv1helpers.NewRule("attest").Groups("certificates.k8s.io").Resources("signers").Names(trustBundleSigners...).RuleOrDie()
	i := slices.IndexFunc(roles, func(r rbacv1.ClusterRole) bool { return r.Name == trustBundlePublisherRole })
	if i < 0 {
		roles = append(roles, rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: trustBundlePublisherRole, Labels: bootstrappolicy.Label, Annotations: bootstrappolicy.Annotation},
			Rules: []rbacv1.PolicyRule{
				rbacv1helpers.NewRule("create", "update", "delete", "list", "watch").Groups("certificates.k8s.io").Resources("clustertrustbundles").RuleOrDie(),
				rbacv1helpers.NewRule("create", "update", "patch").Groups("", "events.k8s.io").Resources("events").RuleOrDie(),
			},
		})
		i = len(roles) - 1
	}
	roles[i].Rules = append(roles[i].Rules, attest)
	if !slices.ContainsFunc(bindings, func(b rbacv1.ClusterRoleBinding) bool { return b.Name == trustBundlePublisherRole }) {
		b := rbacv1helpers.NewClusterBinding(trustBundlePublisherRole).SAs("kube-system", "kube-apiserver-serving-clustertrustbundle-publisher").BindingOrDie()
		b.Labels, b.Annotations = bootstrappolicy.Label, bootstrappolicy.Annotation
		bindings = append(bindings, b)
	}
	return roles, bindings
}
