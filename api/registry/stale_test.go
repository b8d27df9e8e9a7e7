package registry

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/internal/memlog"
)

// TestRegistryOnStaleState: deletes and namespace admission on a node
// whose state trails the leader's (memlog.Follower, as a follower running
// writes itself) answer as the leader would: what was written elsewhere
// and acknowledged is found, and a refusal is made from a state confirmed
// by a read index.
func TestRegistryOnStaleState(t *testing.T) {
	l := memlog.New()
	f := memlog.NewFollower(l)
	leader := newRegistry(t, nil, l, CoreResources())
	follower := newRegistry(t, nil, f, CoreResources())
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}})
	if err := leader.Bootstrap(genericapirequest.WithNamespace(ctx, ""), []byte{10, 96, 0, 1}, 6443); err != nil {
		t.Fatal(err)
	}
	f.CatchUp()
	in := func(ns string) context.Context { return genericapirequest.WithNamespace(ctx, ns) }
	sasGVR := schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	sa := func(name string) *api.ServiceAccount {
		return &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}

	t.Run("a create in a namespace created elsewhere is admitted", func(t *testing.T) {
		if _, err := leader.Store(nsGVR).Create(in(""), &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, false); err != nil {
			t.Fatal(err)
		}
		before := f.ReadIndexes.Load()
		if _, err := follower.Store(sasGVR).Create(in("fresh"), sa("a"), false); err != nil {
			t.Fatal(err)
		}
		if got := f.ReadIndexes.Load() - before; got != 1 {
			t.Fatalf("%d read indexes, want 1", got)
		}
	})
	t.Run("a create in a namespace that does not exist is 404 after a read index", func(t *testing.T) {
		before := f.ReadIndexes.Load()
		_, err := follower.Store(sasGVR).Create(in("none"), sa("a"), false)
		if !apierrors.IsNotFound(err) {
			t.Fatalf("got %v, want 404", err)
		}
		if got := f.ReadIndexes.Load() - before; got != 1 {
			t.Fatalf("%d read indexes, want 1", got)
		}
	})
	t.Run("a delete of an object created elsewhere deletes it", func(t *testing.T) {
		if _, err := leader.Store(sasGVR).Create(in("default"), sa("b"), false); err != nil {
			t.Fatal(err)
		}
		if _, done, err := follower.Store(sasGVR).Delete(in("default"), "b", &metav1.DeleteOptions{}, false); err != nil || !done {
			t.Fatalf("done %v, %v", done, err)
		}
		if _, err := leader.Store(sasGVR).Get(in("default"), "b", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after the delete: %v, want 404", err)
		}
	})
	t.Run("a delete with a precondition on a version written elsewhere holds", func(t *testing.T) {
		out, err := leader.Store(sasGVR).Create(in("default"), sa("c"), false)
		if err != nil {
			t.Fatal(err)
		}
		f.CatchUp()
		cur := out.(*api.ServiceAccount)
		cur.Labels = map[string]string{"k": "v"}
		upd, err := leader.Store(sasGVR).Update(in("default"), "c", rest.DefaultUpdatedObjectInfo(cur), false)
		if err != nil {
			t.Fatal(err)
		}
		rv := upd.(*api.ServiceAccount).ResourceVersion
		opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
		if _, done, err := follower.Store(sasGVR).Delete(in("default"), "c", opts, false); err != nil || !done {
			t.Fatalf("done %v, %v", done, err)
		}
	})
	t.Run("a delete of an object deleted elsewhere is 404", func(t *testing.T) {
		if _, err := leader.Store(sasGVR).Create(in("default"), sa("d"), false); err != nil {
			t.Fatal(err)
		}
		f.CatchUp()
		if _, _, err := leader.Store(sasGVR).Delete(in("default"), "d", &metav1.DeleteOptions{}, false); err != nil {
			t.Fatal(err)
		}
		if _, _, err := follower.Store(sasGVR).Delete(in("default"), "d", &metav1.DeleteOptions{}, false); !apierrors.IsNotFound(err) {
			t.Fatalf("got %v, want 404", err)
		}
	})
}
