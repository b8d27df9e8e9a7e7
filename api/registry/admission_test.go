package registry

import (
	"context"
	"errors"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/internal/memlog"
)

// stepsFor is an Admission that gives each resource the steps listed for it.
type stepsFor map[schema.GroupVersionResource][]AdmitFunc

func (a stepsFor) For(gvr schema.GroupVersionResource, _ schema.GroupVersionKind) []AdmitFunc {
	return a[gvr]
}

func TestAdmissionChain(t *testing.T) {
	sasGVR := schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	var ran []string
	refuse := ""
	step := func(name string) AdmitFunc {
		return func(_ context.Context, obj, old runtime.Object) error {
			ran = append(ran, name)
			if name == refuse {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, obj.(*api.ServiceAccount).Name, errors.New("refused by "+name))
			}
			return nil
		}
	}
	resources := CoreResources()
	for _, r := range resources {
		if r.GVR == sasGVR {
			r.Admit = step("own")
		}
	}
	stor, err := storage.New(nil, memlog.New())
	if err != nil {
		t.Fatal(err)
	}
	reg := New(stor, resources, stepsFor{sasGVR: {step("plugin-1"), step("plugin-2")}})
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}})
	if err := reg.Bootstrap(genericapirequest.WithNamespace(ctx, ""), []byte{10, 96, 0, 1}, 6443); err != nil {
		t.Fatal(err)
	}
	ctx = genericapirequest.WithNamespace(ctx, "default")
	sas := reg.Store(sasGVR)

	// Assigning a resource's hook after the registry is built changes
	// nothing: the chain was fixed when the store was.
	sas.Admit = step("late")

	tests := []struct {
		name   string
		refuse string
		write  func() error
		want   []string
	}{
		{"a create runs the resource's own step, then the plugins in order", "", func() error {
			_, err := sas.Create(ctx, &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, false)
			return err
		}, []string{"own", "plugin-1", "plugin-2"}},
		{"an update runs the same chain", "", func() error {
			_, err := sas.Update(ctx, "a", rest.DefaultUpdatedObjectInfo(&api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", Labels: map[string]string{"x": "y"}}}), false)
			return err
		}, []string{"own", "plugin-1", "plugin-2"}},
		{"the first refusal ends the chain and stores nothing", "plugin-1", func() error {
			_, err := sas.Create(ctx, &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, false)
			return err
		}, []string{"own", "plugin-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ran, refuse = nil, tc.refuse
			err := tc.write()
			if tc.refuse == "" && err != nil {
				t.Fatal(err)
			}
			if tc.refuse != "" && !apierrors.IsForbidden(err) {
				t.Fatalf("got %v, want the refusal", err)
			}
			if !slices.Equal(ran, tc.want) {
				t.Fatalf("ran %v, want %v", ran, tc.want)
			}
		})
	}
	if _, err := sas.Get(ctx, "b", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused create was stored: %v", err)
	}
}
