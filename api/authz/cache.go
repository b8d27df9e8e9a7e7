package authz

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/fsm"
)

// Sentinel errors of the package.
var (
	// ErrDecode: a stored RBAC object could not be opened or decoded with
	// the RBAC stores' codec, or holds another kind than its key's. The
	// object is left out of the cache (it grants nothing) and the error,
	// which names the key and never quotes the value, is logged.
	ErrDecode = errors.New("authz: cannot decode stored RBAC object")
	// ErrLoad: the initial or post-restore load of the RBAC objects failed.
	ErrLoad = errors.New("authz: cannot load RBAC objects")
)

// Source is what the Cache needs from the replicated state machine: the
// applied stream and a listing at one revision. *fsm.FSM provides it.
type Source interface {
	// Subscribe adds l to the applied stream; l is called on the apply
	// path, after the change is visible to List, and must not block.
	Subscribe(l fsm.Listener) (cancel func())
	// List reads the applied state at opts.Revision (0: latest) without
	// waiting; the result's Revision says which revision was read.
	List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error)
}

var rbacPrefixes = []fsm.Prefix{
	{Group: registry.RBACGroupVersion.Group, Resource: "roles"},
	{Group: registry.RBACGroupVersion.Group, Resource: "clusterroles"},
	{Group: registry.RBACGroupVersion.Group, Resource: "rolebindings"},
	{Group: registry.RBACGroupVersion.Group, Resource: "clusterrolebindings"},
}

// snapshot is one immutable view of the RBAC objects. A published snapshot
// is never modified: a change builds the next one, copying only the maps
// and slices it touches.
type snapshot struct {
	roles               map[string]map[string]*rbacv1.Role // namespace → name → role
	roleBindings        map[string][]*rbacv1.RoleBinding   // namespace → bindings by name
	clusterRoles        map[string]*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding // by name
}

// Cache holds the decoded v1 RBAC objects of this node's applied state and
// serves kube's rule resolver interfaces (RoleGetter, RoleBindingLister,
// ClusterRoleGetter, ClusterRoleBindingLister) from them without locks.
type Cache struct {
	src Source
	// open returns the encoded value a KV stores, decrypted at rest
	// (registry.Registry.Open); nil: the value itself.
	open func(*fsm.KV) ([]byte, error)
	// OnError reports objects the cache had to leave out; nil ignores them.
	onError func(error)

	cur atomic.Pointer[snapshot]

	mu     sync.Mutex // serialises writers (apply path, load)
	loaded uint64     // revision of the last full load: older events are in it
	cancel func()
}

var (
	_ fsm.Listener        = (*Cache)(nil)
	_ fsm.RestoreListener = (*Cache)(nil)

	_ rbacvalidation.RoleGetter               = (*Cache)(nil)
	_ rbacvalidation.RoleBindingLister        = (*Cache)(nil)
	_ rbacvalidation.ClusterRoleGetter        = (*Cache)(nil)
	_ rbacvalidation.ClusterRoleBindingLister = (*Cache)(nil)
)

// NewCache subscribes to src and loads its RBAC objects. open decrypts a
// stored value (registry.Registry.Open; nil when values are not encrypted
// at rest). onError, if not nil, is told about stored objects that could
// not be decoded.
func NewCache(src Source, open func(*fsm.KV) ([]byte, error), onError func(error)) (*Cache, error) {
	c := &Cache{src: src, open: open, onError: onError}
	c.cur.Store(&snapshot{})
	c.mu.Lock()
	defer c.mu.Unlock()
	// Subscribe first, then load: events that race with the load wait on
	// mu and are dropped if the load already holds them.
	c.cancel = src.Subscribe(c)
	if err := c.loadLocked(0); err != nil {
		c.cancel()
		return nil, err
	}
	return c, nil
}

// Close unsubscribes; the cache keeps serving its last view.
func (c *Cache) Close() { c.cancel() }

// loadLocked replaces the view with the RBAC objects at rev (0: latest).
func (c *Cache) loadLocked(rev uint64) error {
	next := &snapshot{
		roles:        map[string]map[string]*rbacv1.Role{},
		roleBindings: map[string][]*rbacv1.RoleBinding{},
		clusterRoles: map[string]*rbacv1.ClusterRole{},
	}
	for _, p := range rbacPrefixes {
		res, err := c.src.List(p, fsm.ListOptions{Revision: rev})
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrLoad, p.Resource, err)
		}
		rev = res.Revision // the other kinds are read at the same revision
		for _, kv := range res.KVs {
			c.put(next, kv)
		}
	}
	sortBindings(next)
	c.loaded = rev
	c.cur.Store(next)
	return nil
}

// isRBACKey reports a built-in RBAC object's key. A custom resource in the
// RBAC group lives in the custom key space and never grants anything.
func isRBACKey(k fsm.Key) bool {
	return k.Space == fsm.SpaceBuiltin && k.Group == registry.RBACGroupVersion.Group
}

// OnApply folds the batch's RBAC changes into a new snapshot. It runs on the
// apply path: it decodes only RBAC objects, which change rarely.
func (c *Cache) OnApply(events []fsm.Event) {
	first := -1
	for i := range events {
		if isRBACKey(events[i].KV.Key) {
			first = i
			break
		}
	}
	if first < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.cur.Load().clone()
	changed := false
	for _, e := range events[first:] {
		if !isRBACKey(e.KV.Key) || e.Revision <= c.loaded {
			continue
		}
		changed = true
		if e.Type == fsm.EventDelete {
			next.remove(e.KV.Key)
			continue
		}
		c.put(next, e.KV)
	}
	if changed {
		sortBindings(next)
		c.cur.Store(next)
	}
}

// OnIndex is part of fsm.Listener; the cache has nothing to do per index.
func (c *Cache) OnIndex(uint64) {}

// OnRestore reloads everything: a snapshot replaced the state without
// events for what changed.
func (c *Cache) OnRestore(index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.loadLocked(index); err != nil {
		// The restore path is already past the point of no return;
		// keep the previous view and say so.
		c.report(err)
	}
}

func (c *Cache) report(err error) {
	if c.onError != nil {
		c.onError(err)
	}
}

// storedCodec is the codec the RBAC stores write and read their values
// with (registry.StorageCodec of the served version: protobuf, decoded into
// internal objects with defaulting), and the only one the cache decodes
// with. Bytes in any other encoding under an RBAC key, JSON above all,
// were not written by an RBAC store and grant nothing: a universal
// deserializer would make any writer of the key a writer of grants.
var storedCodec = registry.StorageCodec(registry.RBACGroupVersion)

// heldKind is a resource the cache holds: the internal type its store
// decodes to, and the v1 type the rule resolver reads.
type heldKind struct {
	internal reflect.Type
	newV1    func() runtime.Object
}

var heldKinds = map[string]heldKind{
	"roles":               {reflect.TypeFor[*rbac.Role](), func() runtime.Object { return &rbacv1.Role{} }},
	"clusterroles":        {reflect.TypeFor[*rbac.ClusterRole](), func() runtime.Object { return &rbacv1.ClusterRole{} }},
	"rolebindings":        {reflect.TypeFor[*rbac.RoleBinding](), func() runtime.Object { return &rbacv1.RoleBinding{} }},
	"clusterrolebindings": {reflect.TypeFor[*rbac.ClusterRoleBinding](), func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }},
}

// decodeStored decodes kv's value as its RBAC store does and returns the v1
// object the rule resolver reads. The value must be the kind held. Errors
// name the key and never quote the value (nor the decoder's message,
// which may).
func (c *Cache) decodeStored(kv *fsm.KV, held heldKind) (runtime.Object, error) {
	k := kv.Key
	data := kv.Value
	if c.open != nil {
		var err error
		if data, err = c.open(kv); err != nil {
			// Open's errors name the key, never the value.
			return nil, fmt.Errorf("%w %s: %w", ErrDecode, keyName(k), err)
		}
	}
	internal, _, err := storedCodec.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w %s: not in the RBAC stores' encoding", ErrDecode, keyName(k))
	}
	if reflect.TypeOf(internal) != held.internal {
		return nil, fmt.Errorf("%w %s: not the kind its resource holds", ErrDecode, keyName(k))
	}
	out := held.newV1()
	if err := registry.Scheme.Convert(internal, out, nil); err != nil {
		return nil, fmt.Errorf("%w %s: not convertible to %s", ErrDecode, keyName(k), registry.RBACGroupVersion)
	}
	return out, nil
}

// keyName names a stored object by its key, quoted.
func keyName(k fsm.Key) string {
	if k.Namespace == "" {
		return fmt.Sprintf("%s %q", k.Resource, k.Name)
	}
	return fmt.Sprintf("%s %q", k.Resource, k.Namespace+"/"+k.Name)
}

// put decodes kv into next, replacing what was at its key. A value that
// does not decode removes the key: a broken object grants nothing.
func (c *Cache) put(next *snapshot, kv *fsm.KV) {
	k := kv.Key
	held, ok := heldKinds[k.Resource]
	if !ok {
		return // not a kind the resolver reads
	}
	obj, err := c.decodeStored(kv, held)
	if err != nil {
		next.remove(k)
		c.report(err)
		return
	}
	switch o := obj.(type) {
	case *rbacv1.Role:
		ns := next.roles[k.Namespace]
		cp := make(map[string]*rbacv1.Role, len(ns)+1)
		for n, r := range ns {
			cp[n] = r
		}
		cp[k.Name] = o
		next.roles[k.Namespace] = cp
	case *rbacv1.ClusterRole:
		next.clusterRoles[k.Name] = o
	case *rbacv1.RoleBinding:
		next.roleBindings[k.Namespace] = append(without(next.roleBindings[k.Namespace], k.Name), o)
	case *rbacv1.ClusterRoleBinding:
		next.clusterRoleBindings = append(without(next.clusterRoleBindings, k.Name), o)
	}
}

// clone copies the top-level maps; put and remove copy what lies below
// before changing it.
func (s *snapshot) clone() *snapshot {
	next := &snapshot{
		roles:               make(map[string]map[string]*rbacv1.Role, len(s.roles)),
		roleBindings:        make(map[string][]*rbacv1.RoleBinding, len(s.roleBindings)),
		clusterRoles:        make(map[string]*rbacv1.ClusterRole, len(s.clusterRoles)),
		clusterRoleBindings: s.clusterRoleBindings,
	}
	for k, v := range s.roles {
		next.roles[k] = v
	}
	for k, v := range s.roleBindings {
		next.roleBindings[k] = v
	}
	for k, v := range s.clusterRoles {
		next.clusterRoles[k] = v
	}
	return next
}

func (s *snapshot) remove(k fsm.Key) {
	switch k.Resource {
	case "roles":
		if ns, ok := s.roles[k.Namespace]; ok {
			cp := make(map[string]*rbacv1.Role, len(ns))
			for n, r := range ns {
				if n != k.Name {
					cp[n] = r
				}
			}
			if len(cp) == 0 {
				delete(s.roles, k.Namespace)
			} else {
				s.roles[k.Namespace] = cp
			}
		}
	case "clusterroles":
		delete(s.clusterRoles, k.Name)
	case "rolebindings":
		if bs := without(s.roleBindings[k.Namespace], k.Name); len(bs) > 0 {
			s.roleBindings[k.Namespace] = bs
		} else {
			delete(s.roleBindings, k.Namespace)
		}
	case "clusterrolebindings":
		s.clusterRoleBindings = without(s.clusterRoleBindings, k.Name)
	}
}

// named is what RoleBinding and ClusterRoleBinding share.
type named interface{ GetName() string }

// without returns a new slice of in's elements not named name.
func without[T named](in []T, name string) []T {
	out := make([]T, 0, len(in)+1)
	for _, b := range in {
		if b.GetName() != name {
			out = append(out, b)
		}
	}
	return out
}

// sortBindings orders bindings by name, so that which binding a decision
// names ("RBAC: allowed by ...") does not depend on write order. Only the
// slices of next are sorted, and they are next's own copies or unchanged
// already-sorted ones.
func sortBindings(next *snapshot) {
	for _, bs := range next.roleBindings {
		if !sort.SliceIsSorted(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name }) {
			sort.Slice(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
		}
	}
	crbs := next.clusterRoleBindings
	if !sort.SliceIsSorted(crbs, func(i, j int) bool { return crbs[i].Name < crbs[j].Name }) {
		sort.Slice(crbs, func(i, j int) bool { return crbs[i].Name < crbs[j].Name })
	}
}

// GetRole returns the named Role; the result is shared and must not be
// modified. A missing role is NotFound, as kube's lister says it.
func (c *Cache) GetRole(_ context.Context, namespace, name string) (*rbacv1.Role, error) {
	if r := c.cur.Load().roles[namespace][name]; r != nil {
		return r, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("role"), name)
}

// ListRoleBindings returns the namespace's RoleBindings by name; the slice
// and its elements are shared and must not be modified.
func (c *Cache) ListRoleBindings(_ context.Context, namespace string) ([]*rbacv1.RoleBinding, error) {
	return c.cur.Load().roleBindings[namespace], nil
}

// GetClusterRole returns the named ClusterRole; the result is shared and
// must not be modified.
func (c *Cache) GetClusterRole(_ context.Context, name string) (*rbacv1.ClusterRole, error) {
	if r := c.cur.Load().clusterRoles[name]; r != nil {
		return r, nil
	}
	return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), name)
}

// ListClusterRoleBindings returns every ClusterRoleBinding by name; the
// slice and its elements are shared and must not be modified.
func (c *Cache) ListClusterRoleBindings(context.Context) ([]*rbacv1.ClusterRoleBinding, error) {
	return c.cur.Load().clusterRoleBindings, nil
}
