package registry

import (
	"context"
	"fmt"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// DefaultMaxObjectBytes is etcd's default request limit (--max-request-bytes).
const DefaultMaxObjectBytes = storage.DefaultMaxObjectBytes

// Registry holds one Store per served resource.
type Registry struct {
	// storage is the node's storage layer, which every Store's storage
	// shares.
	storage *storage.Storage
	stores  map[schema.GroupVersionResource]*Store
	ordered []*Store
	// custom are the custom resources' stores, which change while the
	// node serves (customstores.go); a Serving view shares them.
	custom *customStores

	virtuals     map[virtualKey]*Virtual
	virtualOrder []*Virtual
	// adm is the node's admission chain; AddVirtual asks it for each
	// virtual resource's validating steps.
	adm Admission
	// origin is the registry a Serving view was made from (nil for that
	// one): it holds every built-in resource, served or not.
	origin *Registry
}

// root is the registry with every built-in resource, served or not.
func (r *Registry) root() *Registry {
	if r.origin != nil {
		return r.origin
	}
	return r
}

// New builds a store for each of resources on stor, each guarded by the
// resource's own Admit and then by adm's steps for it (nil: none).
func New(stor *storage.Storage, resources []*Resource, adm Admission) *Registry {
	r := &Registry{storage: stor, stores: map[schema.GroupVersionResource]*Store{}, adm: adm, custom: &customStores{}}
	for _, res := range resources {
		s, err := r.newStore(res, adm)
		if err != nil {
			// A built-in resource outside the built-in key space is a
			// defect of this build, never of a request: refuse to run.
			panic(fmt.Sprintf("registry: %v", err))
		}
		r.stores[res.GVR] = s
		r.ordered = append(r.ordered, s)
	}
	if s := r.stores[CustomResourceDefinitionsGVR]; s != nil {
		// Refused definitions (definitions.go) fail before kube's
		// validating admission sees them, as a strategy error would.
		s.validateChain = append([]ValidateFunc{r.validateDefinition}, s.validateChain...)
	}
	return r
}

// newStore builds res's store on the registry's storage, guarded by adm:
// a custom resource's in the custom key space, a built-in one's in the
// built-in space (storage.ResourceConfig.Custom).
func (r *Registry) newStore(res *Resource, adm Admission) (*Store, error) {
	stored := res.Stored()
	cfg := storage.ResourceConfig{
		GVR: res.GVR, Stored: stored.GroupResource(), Codec: StorageCodec(stored.GroupVersion()),
		Convertor: Scheme, NewFunc: res.NewFunc, TTL: res.TTL,
	}
	if res.Custom != nil {
		cfg.Codec, cfg.Convertor, cfg.Custom = res.Custom.Storage, res.Convertor(), true
	}
	st, err := r.storage.ForResource(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{Resource: res, chain: chain(res, adm), deleteChain: deleteChain(res, adm), validateChain: validateChain(res, adm), storage: st}
	if res.Namespaced {
		s.admit = r.admitNamespace
	}
	return s, nil
}

// Store returns the store serving gvr, or nil. A built-in resource wins
// over a custom one of the same name.
func (r *Registry) Store(gvr schema.GroupVersionResource) *Store {
	if s := r.stores[gvr]; s != nil {
		return s
	}
	return r.custom.store(gvr)
}

// Stores returns every store, built-in ones in registration order and
// then the custom ones, for discovery.
func (r *Registry) Stores() []*Store {
	custom := r.custom.all()
	if len(custom) == 0 {
		return r.ordered
	}
	return append(r.ordered[:len(r.ordered):len(r.ordered)], custom...)
}

// InternalAtRest is the transformation of the internal records that hold
// secret material (storage.Storage.InternalAtRest).
func (r *Registry) InternalAtRest() storage.AtRest { return r.storage.InternalAtRest() }

// AtRestOf is the transformation the stored value of key is sealed with
// (storage.Storage.AtRestOf).
func (r *Registry) AtRestOf(key fsm.Key) storage.AtRest { return r.storage.AtRestOf(key) }

// Open returns the encoded value kv stores, whatever resource it belongs to
// (the RBAC cache decodes stored values itself).
func (r *Registry) Open(kv *fsm.KV) ([]byte, error) { return r.storage.Open(kv) }

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// admitNamespace is kube's NamespaceLifecycle admission for creates: the
// namespace must exist and must not be terminating. A refusal is made
// from a namespace confirmed current (storage.Reading): the local state
// may be behind a namespace created a moment ago through another node.
// Admission lets a write through on the state it reads, as kube's reads
// its informers.
func (r *Registry) admitNamespace(ctx context.Context, s *Store, obj runtime.Object) error {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	nsStore := r.stores[namespacesGVR]
	read := nsStore.storage.Reading(nsStore.storage.Key("", ns))
	for {
		nsObj, err := read.Object(ctx) // only read: no copy
		if err != nil {
			return err
		}
		var refusal error
		switch {
		case nsObj == nil:
			refusal = apierrors.NewNotFound(nsStore.GroupResource(), ns)
		case nsObj.(*api.Namespace).Status.Phase == api.NamespaceTerminating:
			m, _ := meta.Accessor(obj)
			refusal = apierrors.NewForbidden(s.GroupResource(), m.GetName(),
				fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
		default:
			return nil
		}
		if ok, err := read.Stands(ctx, storage.RevisionOf(nsObj)); err != nil {
			return err
		} else if ok {
			return refusal
		}
	}
}

// Bootstrap creates what a fresh cluster must have: the default, kube-system
// and kube-public namespaces, and the Service default/kubernetes pointing at
// the API. It is idempotent and safe to run on every start of a leader.
func (r *Registry) Bootstrap(ctx context.Context, clusterIP net.IP, apiPort int32) error {
	nsStore := r.stores[namespacesGVR]
	for _, name := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic} {
		nctx := genericapirequest.WithNamespace(ctx, "")
		_, err := nsStore.Create(nctx, &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, false)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bootstrap namespace %s: %w", name, err)
		}
	}
	svcStore := r.stores[schema.GroupVersionResource{Version: "v1", Resource: "services"}]
	if svcStore == nil {
		return nil
	}
	sctx := genericapirequest.WithNamespace(ctx, metav1.NamespaceDefault)
	want := &api.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"},
		},
		Spec: api.ServiceSpec{
			Type:            api.ServiceTypeClusterIP,
			ClusterIP:       clusterIP.String(),
			ClusterIPs:      []string{clusterIP.String()},
			IPFamilies:      []api.IPFamily{ipFamily(clusterIP)},
			IPFamilyPolicy:  ptr(api.IPFamilyPolicySingleStack),
			SessionAffinity: api.ServiceAffinityNone,
			Ports: []api.ServicePort{{
				Name: "https", Protocol: api.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(apiPort),
			}},
			InternalTrafficPolicy: ptr(api.ServiceInternalTrafficPolicyCluster),
		},
	}
	_, err := svcStore.Create(sctx, want, false)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bootstrap service default/kubernetes: %w", err)
	}
	return nil
}

func ipFamily(ip net.IP) api.IPFamily {
	if ip.To4() != nil {
		return api.IPv4Protocol
	}
	return api.IPv6Protocol
}

func ptr[T any](v T) *T { return &v }

// Serving returns a view of r that serves only the resources and virtual
// resources serves accepts, given each one's GVR (a subresource's parent)
// and the kind it takes. The view shares r's stores: what --runtime-config
// hides from clients stays readable and writable for the server itself
// (the RBAC bootstrap, namespace admission), as kube-apiserver keeps its
// storage for a version it does not serve. Call it after every AddVirtual.
func (r *Registry) Serving(serves func(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) bool) *Registry {
	v := &Registry{storage: r.storage, stores: map[schema.GroupVersionResource]*Store{}, custom: r.custom, adm: r.adm, origin: r.root()}
	for _, s := range r.ordered {
		if serves(s.GVR, s.GVK()) {
			v.stores[s.GVR] = s
			v.ordered = append(v.ordered, s)
		}
	}
	for _, vr := range r.virtualOrder {
		if serves(vr.GVR, vr.Kind()) {
			v.AddVirtual(vr)
		}
	}
	return v
}
