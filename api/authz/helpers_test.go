package authz

import (
	"context"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// directBackend applies every proposal to a real FSM at the next index, as
// a one-node raft would, without raft.
type directBackend struct {
	mu   sync.Mutex
	f    *fsm.FSM
	next uint64
}

func (b *directBackend) Propose(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return b.f.Apply(&raft.Log{Index: b.next, Type: raft.LogCommand, Data: cmd.Encode()}).(*fsm.Result), nil
}
func (b *directBackend) ReadIndex(context.Context) (uint64, error) { return b.f.AppliedIndex(), nil }
func (b *directBackend) AppliedIndex() uint64                      { return b.f.AppliedIndex() }
func (b *directBackend) WaitApplied(ctx context.Context, index uint64) error {
	return b.f.WaitApplied(ctx, index)
}
func (b *directBackend) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) {
	return b.f.Get(key, rev)
}
func (b *directBackend) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return b.f.List(p, opts)
}

// world is a registry with the RBAC resources over a real FSM, the cache
// and authorizer fed from it, and the escalation checks in the admission chain, wired as
// cmd/trustplane wires them.
type world struct {
	t     testing.TB
	back  *directBackend
	reg   *registry.Registry
	cache *Cache
	authz *Authorizer

	// errs are what the cache reported; a test that expects some takes
	// them (takeErrs), and any left fail the test.
	errsMu sync.Mutex
	errs   []error
}

// takeErrs returns and forgets what the cache reported.
func (w *world) takeErrs() []error {
	w.errsMu.Lock()
	defer w.errsMu.Unlock()
	errs := w.errs
	w.errs = nil
	return errs
}

func newWorld(t testing.TB, bootstrap bool) *world {
	t.Helper()
	back := &directBackend{f: fsm.New()}
	stor, err := storage.New(nil, back)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, back: back}
	cache, err := NewCache(back.f, stor.Open, func(err error) {
		w.errsMu.Lock()
		defer w.errsMu.Unlock()
		w.errs = append(w.errs, err)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cache.Close()
		if errs := w.takeErrs(); len(errs) > 0 {
			t.Errorf("cache errors: %v", errs)
		}
	})
	a := New(cache)
	w.cache, w.authz = cache, a
	w.reg = registry.New(stor, append(registry.CoreResources(), registry.RBACResources()...), a)
	reg := w.reg
	for _, ns := range []string{"kube-system", "kube-public", "default", "ns1", "ns2"} {
		w.create(adminCtx(""), schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	if bootstrap {
		if err := Bootstrap(context.Background(), reg); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

var admin = &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

func adminCtx(ns string) context.Context { return userCtx(admin, ns) }

func userCtx(u user.Info, ns string) context.Context {
	return genericapirequest.WithNamespace(genericapirequest.WithUser(context.Background(), u), ns)
}

// writeCtx is the context the API gives a write of resource in ns.
func writeCtx(u user.Info, verb string, gvr schema.GroupVersionResource, ns, name string) context.Context {
	return genericapirequest.WithRequestInfo(userCtx(u, ns), &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIPrefix: "apis", APIGroup: gvr.Group, APIVersion: gvr.Version,
		Resource: gvr.Resource, Namespace: ns, Name: name,
	})
}

func (w *world) create(ctx context.Context, gvr schema.GroupVersionResource, obj runtime.Object) {
	w.t.Helper()
	if _, err := w.tryCreate(ctx, gvr, obj); err != nil {
		w.t.Fatalf("create %s: %v", gvr.Resource, err)
	}
}

func (w *world) tryCreate(ctx context.Context, gvr schema.GroupVersionResource, obj runtime.Object) (runtime.Object, error) {
	return w.reg.Store(gvr).Create(ctx, obj, false)
}

func (w *world) tryUpdate(ctx context.Context, gvr schema.GroupVersionResource, obj runtime.Object) (runtime.Object, error) {
	name := obj.(metav1.Object).GetName()
	return w.reg.Store(gvr).Update(ctx, name, rest.DefaultUpdatedObjectInfo(obj), false)
}

func (w *world) delete(ctx context.Context, gvr schema.GroupVersionResource, name string) {
	w.t.Helper()
	if _, _, err := w.reg.Store(gvr).Delete(ctx, name, &metav1.DeleteOptions{}, false); err != nil {
		w.t.Fatalf("delete %s %s: %v", gvr.Resource, name, err)
	}
}

func role(ns, name string, rules ...rbac.PolicyRule) *rbac.Role {
	return &rbac.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
}

func clusterRole(name string, rules ...rbac.PolicyRule) *rbac.ClusterRole {
	return &rbac.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func rule(verbs, groups, resources []string) rbac.PolicyRule {
	return rbac.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

func userSubject(name string) rbac.Subject {
	return rbac.Subject{Kind: rbac.UserKind, APIGroup: rbac.GroupName, Name: name}
}

func groupSubject(name string) rbac.Subject {
	return rbac.Subject{Kind: rbac.GroupKind, APIGroup: rbac.GroupName, Name: name}
}

func saSubject(ns, name string) rbac.Subject {
	return rbac.Subject{Kind: rbac.ServiceAccountKind, Namespace: ns, Name: name}
}

func roleBinding(ns, name, kind, roleName string, subjects ...rbac.Subject) *rbac.RoleBinding {
	return &rbac.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbac.RoleRef{APIGroup: rbac.GroupName, Kind: kind, Name: roleName},
		Subjects:   subjects,
	}
}

func clusterRoleBinding(name, roleName string, subjects ...rbac.Subject) *rbac.ClusterRoleBinding {
	return &rbac.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbac.RoleRef{APIGroup: rbac.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   subjects,
	}
}
