package authn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	typedv1core "k8s.io/client-go/kubernetes/typed/core/v1"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/registry"
)

// Stores finds the generic store of a served resource (nil when the
// resource is not served); *registry.Registry is one.
type Stores interface {
	// Store returns the store serving gvr, or nil. It is called per lookup,
	// so resources registered after the authenticator was built are found.
	Store(gvr schema.GroupVersionResource) *registry.Store
}

var (
	serviceAccountsGVR = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	podsGVR            = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	secretsGVR         = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	nodesGVR           = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// errUnsupported: the in-process secrets client was asked for something
// other than the merge patch kube's legacy validator sends.
var errUnsupported = errors.New("authn: unsupported secrets operation")

// getter reads one object of one resource from local applied state (the
// RV=0 rule: no read index), like kube's informer-backed token getter.
type getter struct {
	stores Stores
	gvr    schema.GroupVersionResource
}

// Get satisfies rest.Getter; a resource that is not served has no objects.
func (g getter) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	st := g.stores.Store(g.gvr)
	if st == nil {
		return nil, apierrors.NewNotFound(g.gvr.GroupResource(), name)
	}
	return st.Get(ctx, name, opts)
}

// local reads ns/name at RV=0 and converts it to the v1 object out.
func (g getter) local(ns, name string, out runtime.Object) error {
	ctx := genericapirequest.WithNamespace(context.Background(), ns)
	obj, err := g.Get(ctx, name, &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	return registry.Scheme.Convert(obj, out, nil)
}

// consistentFallback bounds the linearizable read a local miss falls back
// to: it needs the leader, and a token review must not hang without one.
const consistentFallback = 10 * time.Second

// read is local, and on a miss a linearizable read (read index through the
// leader), as kube's clientGetter falls back from its informer cache to a
// live GET: a token minted on the leader for an object this node has not
// applied yet must still verify here.
func (g getter) read(ns, name string, out runtime.Object) error {
	if err := g.local(ns, name, out); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(genericapirequest.WithNamespace(context.Background(), ns), consistentFallback)
	defer cancel()
	obj, err := g.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return err
	}
	return registry.Scheme.Convert(obj, out, nil)
}

// tokenGetter is kube's ServiceAccountTokenGetter over the registry: the
// validators use it to check that the objects a token names still exist
// with the uid it carries.
type tokenGetter struct{ stores Stores }

// NewTokenGetter returns a ServiceAccountTokenGetter reading this node's
// applied state, and the leader's on a miss.
func NewTokenGetter(s Stores) serviceaccount.ServiceAccountTokenGetter { return tokenGetter{s} }

func (t tokenGetter) GetServiceAccount(ns, name string) (*v1.ServiceAccount, error) {
	out := &v1.ServiceAccount{}
	return out, getter{t.stores, serviceAccountsGVR}.read(ns, name, out)
}

func (t tokenGetter) GetPod(ns, name string) (*v1.Pod, error) {
	out := &v1.Pod{}
	return out, getter{t.stores, podsGVR}.read(ns, name, out)
}

func (t tokenGetter) GetSecret(ns, name string) (*v1.Secret, error) {
	out := &v1.Secret{}
	return out, getter{t.stores, secretsGVR}.read(ns, name, out)
}

func (t tokenGetter) GetNode(name string) (*v1.Node, error) {
	out := &v1.Node{}
	return out, getter{t.stores, nodesGVR}.read("", name, out)
}

// secretsWriter is the in-process secrets client kube's legacy validator
// labels a used token Secret with (kubernetes.io/legacy-token-last-used).
// Only merge patches are supported: that is all the validator sends. The
// write goes through the registry, so it succeeds on the leader; elsewhere
// it fails and the validator logs it, as kube's does when a write fails.
type secretsWriter struct{ stores Stores }

func (w secretsWriter) Secrets(ns string) typedv1core.SecretInterface {
	return secretPatcher{stores: w.stores, ns: ns}
}

// secretPatcher implements Patch; the embedded interface is nil, so any
// other method panics: nothing in kube's validator calls them.
type secretPatcher struct {
	typedv1core.SecretInterface
	stores Stores
	ns     string
}

func (p secretPatcher) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, sub ...string) (*v1.Secret, error) {
	if pt != types.MergePatchType || len(sub) > 0 {
		return nil, fmt.Errorf("%w: %s patch of secrets %s", errUnsupported, pt, path.Join(append([]string{name}, sub...)...))
	}
	st := p.stores.Store(secretsGVR)
	if st == nil {
		return nil, apierrors.NewNotFound(secretsGVR.GroupResource(), name)
	}
	ctx = genericapirequest.WithNamespace(ctx, p.ns)
	obj, err := st.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		var cur v1.Secret
		if err := registry.Scheme.Convert(old, &cur, nil); err != nil {
			return nil, err
		}
		doc, err := json.Marshal(&cur)
		if err != nil {
			return nil, err
		}
		patched, err := jsonpatch.MergePatch(doc, data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		var next v1.Secret
		if err := json.Unmarshal(patched, &next); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		out := &api.Secret{}
		return out, registry.Scheme.Convert(&next, out, nil)
	}), false)
	if err != nil {
		return nil, err
	}
	out := &v1.Secret{}
	return out, registry.Scheme.Convert(obj, out, nil)
}

// getOnlyStorage is the storage under the generic ServiceAccount store kube's
// TokenREST reads service accounts through: Get reads the registry; nothing
// else is ever called (the embedded interface is nil).
type getOnlyStorage struct {
	storage.Interface
	sas getter
}

// Get fills objPtr (an *api.ServiceAccount) with the object at key
// (/serviceaccounts/<namespace>/<name>); the namespace is in ctx.
func (s getOnlyStorage) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	obj, err := s.sas.Get(ctx, path.Base(key), &metav1.GetOptions{ResourceVersion: opts.ResourceVersion})
	if err != nil {
		return err
	}
	dst, src := reflect.ValueOf(objPtr), reflect.ValueOf(obj)
	if dst.Type() != src.Type() {
		return apierrors.NewInternalError(fmt.Errorf("authn: %T read into %T", obj, objPtr))
	}
	dst.Elem().Set(src.Elem())
	return nil
}

// ReadinessCheck: the registry is ready when the node is.
func (s getOnlyStorage) ReadinessCheck() error { return nil }
