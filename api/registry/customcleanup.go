package registry

import (
	"context"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/finalizer"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/trustplane/trustplane/api/storage"
)

// ErrNoCustomStore: the node serves no version of a definition, so its
// objects cannot be listed or deleted here (yet).
var ErrNoCustomStore = errors.New("registry: no store serves the definition's objects on this node")

var _ finalizer.CRClientGetter = (*Registry)(nil)

// GetCustomResourceListerCollectionDeleter is how kube's CRD finalizer
// deletes a definition's objects when the definition is deleted: through
// the definition's own store, found by its UID, never by URL, as kube's
// apiextensions server finds its storage (crdHandler). A URL names
// whatever store serves it, which for a definition that shadows another
// resource is not the definition's (issue 28: a definition named
// clusterroles.rbac.authorization.k8s.io, deleted, wiped every ClusterRole).
//
// When the node serves none of the definition's versions (a definition
// refused, or whose accepted names are not its spec's), its objects are
// deleted by their keys (storage.CustomKeys): the custom key space, the
// definition's group and spec plural, which its name fixes and no other
// definition shares. Nothing is decoded; finalizers are ignored, since no
// store serves the objects that could ever remove one.
func (r *Registry) GetCustomResourceListerCollectionDeleter(crd *apiextensionsv1.CustomResourceDefinition) (finalizer.ListerCollectionDeleter, error) {
	if stores := r.custom.storesOf(crd.UID); len(stores) > 0 {
		return customObjects{store: stores[0]}, nil
	}
	keys, err := r.storage.CustomKeys(crd.Spec.Group, crd.Spec.Names.Plural)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (uid %s): %w", ErrNoCustomStore, crd.Name, crd.UID, err)
	}
	return unservedObjects{keys: keys}, nil
}

// customObjects lists and deletes one definition's objects through its
// store, as the API server (system:apiserver), so that the
// store's deletion rules (finalizers, graceful deletion) hold. Every
// version's store shares the same stored objects.
type customObjects struct {
	store *Store
}

// finalizerContext is the identity kube's finalizer deletes with.
func finalizerContext(ctx context.Context) context.Context {
	return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}})
}

func (c customObjects) NewList() runtime.Object { return &unstructured.UnstructuredList{} }

func (c customObjects) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	return c.store.List(finalizerContext(ctx), opts)
}

func (c customObjects) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, errors.New("custom objects: no table here")
}

// DeleteCollection deletes the objects of the context's namespace (all of
// a cluster-scoped resource's).
func (c customObjects) DeleteCollection(ctx context.Context, _ rest.ValidateObjectFunc, opts *metav1.DeleteOptions, listOpts *metainternalversion.ListOptions) (runtime.Object, error) {
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if listOpts == nil {
		listOpts = &metainternalversion.ListOptions{}
	}
	return c.store.DeleteCollection(finalizerContext(ctx), listOpts, opts, false)
}

// unservedObjects lists and deletes the objects of a definition no store
// serves, by their keys.
type unservedObjects struct {
	keys *storage.CustomKeys
}

func (u unservedObjects) NewList() runtime.Object { return &unstructured.UnstructuredList{} }

// List returns the objects' names and namespaces only: the finalizer reads
// nothing else, and nothing is decoded.
func (u unservedObjects) List(ctx context.Context, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	kvs, err := u.keys.Live("")
	if err != nil {
		return nil, err
	}
	out := &unstructured.UnstructuredList{}
	for _, kv := range kvs {
		item := unstructured.Unstructured{}
		item.SetName(kv.Key.Name)
		item.SetNamespace(kv.Key.Namespace)
		out.Items = append(out.Items, item)
	}
	return out, nil
}

func (u unservedObjects) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, errors.New("custom objects: no table here")
}

// DeleteCollection deletes the objects of the context's namespace (all of
// a cluster-scoped resource's).
func (u unservedObjects) DeleteCollection(ctx context.Context, _ rest.ValidateObjectFunc, _ *metav1.DeleteOptions, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	_, err := u.keys.Purge(ctx, ns)
	return &unstructured.UnstructuredList{}, err
}
