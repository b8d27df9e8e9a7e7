package storage

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustplane/trustplane/fsm"
)

// Forget unregisters a store: the watch cache no longer decodes its
// resource with it, a store built afterwards takes its place, and its
// cache holds nothing more.
func TestForget(t *testing.T) {
	s, _ := newTestStorage(1)
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}
	old := s.MustForResource(t, ResourceConfig{GVR: gvr, Custom: true})
	kv := &fsm.KV{Key: old.Key("", "g")}
	s.Forget(old)
	if _, err := s.decodeShared(kv); !errors.Is(err, ErrNoResource) {
		t.Fatalf("a forgotten resource decodes: %v", err)
	}
	for _, c := range s.objs.caches {
		if c == &old.objs {
			t.Fatal("the forgotten store's cache is still bounded by the node's budget")
		}
	}
	fresh := s.MustForResource(t, ResourceConfig{GVR: gvr, Custom: true})
	s.mu.RLock()
	registered := s.stores[storedResource{space: fsm.SpaceCustom, gr: gvr.GroupResource()}]
	s.mu.RUnlock()
	if registered != fresh {
		t.Fatal("the store built after Forget does not decode the resource")
	}
	if got := old.objs.put(kv, nil, nil); got != nil || len(old.objs.m) != 0 {
		t.Fatal("a forgotten cache keeps what is put in it")
	}
}

// Unshared copies an Unstructured's top-level map, where its kind lives:
// an encoder setting the kind of the copy leaves the shared one alone.
func TestUnsharedUnstructured(t *testing.T) {
	shared := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Gizmo", "spec": map[string]interface{}{"size": int64(1)}}}
	c := Unshared(shared).(*unstructured.Unstructured)
	c.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "Gizmo"})
	if shared.GetAPIVersion() != "example.com/v1" {
		t.Fatalf("the shared object's apiVersion became %q", shared.GetAPIVersion())
	}
}
