package storage_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
)

// The storage layer alone chooses a key's space: a store builds its keys,
// and refuses any other.
func TestStoreOwnsItsKeySpace(t *testing.T) {
	s, _ := newStore(t)
	if k := s.Key("ns", "a"); k != (fsm.Key{Space: fsm.SpaceBuiltin, Resource: "serviceaccounts", Namespace: "ns", Name: "a"}) {
		t.Fatalf("Key = %v", k)
	}
	ctx := context.Background()
	for name, k := range map[string]fsm.Key{
		"custom space":     {Space: fsm.SpaceCustom, Group: "", Resource: "serviceaccounts", Namespace: "ns", Name: "a"},
		"internal space":   {Space: fsm.SpaceInternal, Resource: "signingkeys", Name: "00000000000000000001"},
		"another resource": {Resource: "secrets", Namespace: "ns", Name: "a"},
		"another group":    {Group: "example.com", Resource: "serviceaccounts", Namespace: "ns", Name: "a"},
	} {
		t.Run(name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), storage.ErrKeySpace.Error()) {
					t.Errorf("%s: %v, want a 500 for a key outside the store", what, err)
				}
			}
			_, err := s.Get(ctx, k, "0")
			check("Get", err)
			_, err = s.Reading(k).Object(ctx)
			check("Reading", err)
			_, err = s.Create(ctx, k, &api.ServiceAccount{}, storage.CreateOptions{})
			check("Create", err)
			_, err = s.GuaranteedUpdate(ctx, k, nil, func(o runtime.Object) (runtime.Object, error) { return o, nil }, storage.UpdateOptions{})
			check("GuaranteedUpdate", err)
			_, err = s.Delete(ctx, k, 0)
			check("Delete", err)
			p := fsm.Prefix{Space: k.Space, Group: k.Group, Resource: k.Resource}
			_, err = s.GetList(ctx, p, &metainternalversion.ListOptions{ResourceVersion: "0"}, nil)
			check("GetList", err)
			_, err = s.Watch(ctx, p, nil, &metainternalversion.ListOptions{})
			check("Watch", err)
		})
	}
}

func TestForResourceKeySpaces(t *testing.T) {
	builtin := func(group, resource string) bool { return group == "" && resource == "serviceaccounts" }
	for _, tc := range []struct {
		name string
		cfg  storage.ResourceConfig
		ok   bool
	}{
		{"a built-in resource of this build", storage.ResourceConfig{GVR: sasGVR}, true},
		{"a built-in store of an unknown resource", storage.ResourceConfig{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}}, false},
		{"a custom resource", storage.ResourceConfig{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}, Custom: true}, true},
		{"a custom resource naming a built-in one", storage.ResourceConfig{GVR: schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, Custom: true}, true},
		{"a custom resource without a group", storage.ResourceConfig{GVR: schema.GroupVersionResource{Version: "v1", Resource: "gizmos"}, Custom: true}, false},
		{"a custom resource with a TTL", storage.ResourceConfig{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}, Custom: true, TTL: 1}, false},
		{"a built-in store in the internal group", storage.ResourceConfig{GVR: schema.GroupVersionResource{Group: fsm.InternalGroup, Version: "v1", Resource: "signingkeys"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stor, err := storage.New(&storage.Config{Builtin: builtin}, memlog.New())
			if err != nil {
				t.Fatal(err)
			}
			defer stor.Close()
			tc.cfg.Codec, tc.cfg.Convertor = registry.StorageCodec(tc.cfg.GVR.GroupVersion()), registry.Scheme
			st, err := stor.ForResource(tc.cfg)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, storage.ErrKeySpace)) {
				t.Fatalf("ForResource = %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				return
			}
			want := fsm.SpaceBuiltin
			if tc.cfg.Custom {
				want = fsm.SpaceCustom
			}
			if k := st.Key("", "x"); k.Space != want || k.Group != tc.cfg.GVR.Group || k.Resource != tc.cfg.GVR.Resource {
				t.Fatalf("Key = %v, want %v %s", k, want, tc.cfg.GVR.GroupResource())
			}
		})
	}
}

// An error about a stored value names the object, never what it holds:
// issue 28's first finding read a signing key out of a decode error.
func TestUndecodableValueIsNotQuoted(t *testing.T) {
	s, l := newStore(t)
	const secret = "SECRET-KEY-MATERIAL"
	for name, value := range map[string]string{
		"json":    `{"apiVersion":"v1","data":{"key":"` + secret + `"}}`,
		"garbage": secret,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := l.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: s.Key("ns", name), Value: []byte(value)}); err != nil {
				t.Fatal(err)
			}
			_, err := s.Get(context.Background(), s.Key("ns", name), "0")
			if !apierrors.IsInternalError(err) || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("Get = %v, want a 500 that does not quote the value", err)
			}
			_, err = s.GetList(context.Background(), s.Prefix("ns"), &metainternalversion.ListOptions{ResourceVersion: "0"}, nil)
			if err == nil || strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("GetList = %v, want an error that does not quote the value", err)
			}
		})
	}
}

// A definition's cleanup by keys reaches its own custom keys and nothing
// else: not a built-in object of the same group and resource, not another
// namespace when one is named.
func TestCustomKeysPurgeOnlyTheirOwn(t *testing.T) {
	l := memlog.New()
	stor, err := storage.New(nil, l)
	if err != nil {
		t.Fatal(err)
	}
	defer stor.Close()
	if _, err := stor.CustomKeys("", "gizmos"); !errors.Is(err, storage.ErrNotCustom) {
		t.Fatalf("a custom resource without a group: %v", err)
	}
	ctx := context.Background()
	put := func(k fsm.Key) {
		if _, err := l.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: k, Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	custom := func(ns, name string) fsm.Key {
		return fsm.Key{Space: fsm.SpaceCustom, Group: "rbac.authorization.k8s.io", Resource: "roles", Namespace: ns, Name: name}
	}
	builtin := fsm.Key{Group: "rbac.authorization.k8s.io", Resource: "roles", Namespace: "a", Name: "r"}
	put(custom("a", "r"))
	put(custom("b", "r"))
	put(builtin)
	keys, err := stor.CustomKeys("rbac.authorization.k8s.io", "roles")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := keys.Purge(ctx, "a"); err != nil || n != 1 {
		t.Fatalf("Purge(a) = %d, %v; want 1", n, err)
	}
	for k, want := range map[fsm.Key]bool{custom("a", "r"): false, custom("b", "r"): true, builtin: true} {
		if kv, _, _ := l.Get(k, 0); (kv != nil) != want {
			t.Errorf("%v live = %v, want %v", k, kv != nil, want)
		}
	}
	if live, err := keys.Live(""); err != nil || len(live) != 1 {
		t.Fatalf("Live = %v, %v; want the one in b", live, err)
	}
}
