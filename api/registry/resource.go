package registry

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Resource describes one served resource: its names on the wire, its
// strategies and its read helpers. The generic Store does the rest.
type Resource struct {
	// GVR is the external group/version/resource served.
	GVR      schema.GroupVersionResource
	KindName string
	// ListKindName is the kind of its lists when it is not KindName+"List"
	// (a custom resource's spec.names.listKind).
	ListKindName string
	Singular     string
	ShortNames   []string
	Categories   []string
	Namespaced   bool

	// StoredAs is where and how the objects are stored when that is not
	// GVR itself: the group and resource of their keys, and the version
	// they are encoded in. Two Resources with the same StoredAs serve the
	// same stored objects, one uid and resourceVersion each, under two
	// group versions, as kube serves events.k8s.io/v1 events from core v1
	// Event's storage. The zero value is GVR.
	StoredAs schema.GroupVersionResource

	// TTL, when positive, deletes an object TTL after its last write, as
	// kube-apiserver stores events on an etcd lease (--event-ttl); the
	// storage layer's Expiry does it, through the log.
	TTL time.Duration

	// NewFunc and NewListFunc return empty internal (hub) objects.
	NewFunc     func() runtime.Object
	NewListFunc func() runtime.Object

	// Strategies; a nil strategy means the verb is not served.
	CreateStrategy rest.RESTCreateStrategy
	UpdateStrategy rest.RESTUpdateStrategy
	DeleteStrategy rest.RESTDeleteStrategy

	// Subresources are the object's subresources served with get, update
	// and patch (status, approval, finalize), each with the strategy that
	// decides which fields an update through it may change.
	Subresources map[string]rest.RESTUpdateStrategy
	// SubresourceVerbs narrows the verbs of a subresource that does not
	// serve all of get, patch and update (a namespace's finalize is
	// update only, as kube-apiserver routes it); a subresource absent from
	// it serves all three.
	SubresourceVerbs map[string][]string

	// ReadOnly hides the write verbs from clients; the server itself may
	// still write through the store (default/kubernetes).
	ReadOnly bool

	// NoDeleteCollection: the resource does not serve deletecollection even
	// though it serves delete (kube's namespaces).
	NoDeleteCollection bool

	// OwnDeletePreconditions: delete checks DeleteOptions preconditions
	// itself, with the storage layer's wording ("Precondition failed: UID
	// in precondition: ..."), as kube's namespace REST does.
	OwnDeletePreconditions bool

	// ReturnDeletedObject: delete answers with the object rather than a Status.
	ReturnDeletedObject bool
	// Finalizers returns resource-specific finalizers that hold a deletion
	// (a namespace's spec.finalizers), in addition to metadata.finalizers.
	Finalizers func(obj runtime.Object) []string
	// OnDeleting adjusts an object whose deletion is pending (namespace phase).
	OnDeleting func(obj runtime.Object)
	// GetAttrs returns the labels and selectable fields of an object.
	GetAttrs func(obj runtime.Object) (labels.Set, fields.Set, error)
	// TableConvertor renders the Table output.
	TableConvertor rest.TableConvertor

	// Admit is the resource's own admission rule, part of its strategy
	// (a legacy token Secret's warning): the first step of its store's
	// chain, before the node's plugins (Admission). See AdmitFunc for when
	// it runs.
	Admit AdmitFunc
	// AdmitDelete is the resource's admission of a delete, run before the
	// object is read: it may refuse the deletion of the named object with
	// a Status error (kube's NamespaceLifecycle keeps the system
	// namespaces).
	AdmitDelete func(ctx context.Context, name string) error

	// Custom is set for a custom resource (customresource.go): its
	// objects are Unstructured, handled in the served version, with
	// codecs of their own instead of the scheme's.
	Custom *Custom
}

// ListKind is the kind of the resource's lists.
func (r *Resource) ListKind() string {
	if r.ListKindName != "" {
		return r.ListKindName
	}
	return r.KindName + "List"
}

// Codecs decode, convert and encode the resource's objects: the scheme's
// for a built-in resource, the definition's for a custom one.
func (r *Resource) Codecs() runtime.NegotiatedSerializer {
	if r.Custom != nil {
		return r.Custom.Codecs
	}
	return Codecs
}

// Convertor converts the resource's objects between versions.
func (r *Resource) Convertor() runtime.ObjectConvertor {
	if r.Custom != nil {
		return r.Custom.Codecs.Convertor()
	}
	return Scheme
}

// Hub is the version the resource's objects are handled in: the
// internal version of a built-in group, the served version of a custom
// resource (which has no internal one).
func (r *Resource) Hub() schema.GroupVersion {
	if r.Custom != nil {
		return r.GVR.GroupVersion()
	}
	return schema.GroupVersion{Group: r.GVR.Group, Version: runtime.APIVersionInternal}
}

// New returns an empty object of the resource's external kind, for
// decoding into (patches, apply).
func (r *Resource) New() (runtime.Object, error) {
	if r.Custom != nil {
		return r.NewFunc(), nil
	}
	return Scheme.New(r.GVK())
}

// GroupResource is the resource's qualified name used in Status errors.
func (r *Resource) GroupResource() schema.GroupResource { return r.GVR.GroupResource() }

// Stored is where and how the resource's objects are stored: StoredAs,
// or GVR when it is unset.
func (r *Resource) Stored() schema.GroupVersionResource {
	if r.StoredAs.Empty() {
		return r.GVR
	}
	return r.StoredAs
}

// Kind is the resource's group kind used in Invalid errors.
func (r *Resource) Kind() schema.GroupKind {
	return schema.GroupKind{Group: r.GVR.Group, Kind: r.KindName}
}

// GVK is the external kind served.
func (r *Resource) GVK() schema.GroupVersionKind { return r.GVR.GroupVersion().WithKind(r.KindName) }

// Verbs lists the verbs served, for discovery.
func (r *Resource) Verbs() []string {
	if r.ReadOnly {
		return []string{"get", "list", "watch"}
	}
	v := []string{}
	if r.CreateStrategy != nil {
		v = append(v, "create")
	}
	if r.DeleteStrategy != nil {
		v = append(v, "delete")
		if !r.NoDeleteCollection {
			v = append(v, "deletecollection")
		}
	}
	v = append(v, "get", "list")
	if r.UpdateStrategy != nil {
		v = append(v, "patch", "update")
	}
	return append(v, "watch")
}

// subresourceVerbs are the verbs a subresource serves unless
// SubresourceVerbs says otherwise.
var subresourceVerbs = []string{"get", "patch", "update"}

// VerbsOf lists the verbs the subresource sub serves, for discovery.
func (r *Resource) VerbsOf(sub string) []string {
	if v, ok := r.SubresourceVerbs[sub]; ok {
		return v
	}
	return subresourceVerbs
}

// Serves reports whether the subresource sub serves verb; a request for a
// verb it does not serve is answered 405, as kube-apiserver's router does.
func (r *Resource) Serves(sub, verb string) bool {
	for _, v := range r.VerbsOf(sub) {
		if v == verb {
			return true
		}
	}
	return false
}
