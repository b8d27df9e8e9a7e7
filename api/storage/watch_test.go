package storage_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
	"github.com/trustplane/trustplane/watchcache"
)

// newWatchedStore is newStore with the watch cache fed from the log's fsm;
// wcfg nil is the default watch configuration.
func newWatchedStore(t *testing.T, wcfg *watchcache.Config) (*storage.Store, *memlog.Log) {
	t.Helper()
	l := memlog.New()
	stor, err := storage.New(&storage.Config{FreshWait: 10 * time.Millisecond, Feed: l.FSM, Watch: wcfg}, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stor.Close)
	s := stor.MustForResource(t, storage.ResourceConfig{
		GVR: sasGVR, Codec: registry.StorageCodec(sasGVR.GroupVersion()), Convertor: registry.Scheme,
		NewFunc: func() runtime.Object { return &api.ServiceAccount{} },
	})
	return s, l
}

// next returns the watcher's next event, failing after a bound.
func next(t *testing.T, w *watchcache.Watcher) watchcache.Event {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return watchcache.Event{}
}

var nsPrefix = fsm.Prefix{Resource: "serviceaccounts", Namespace: "ns"}

func TestWatchSharesTheStoresDecodedObjects(t *testing.T) {
	ctx := context.Background()
	s, _ := newWatchedStore(t, nil)
	if _, err := s.Create(ctx, key("a"), sa("a"), storage.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, nsPrefix, nil, &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := next(t, w)
	if ev.Type != watchcache.Added || ev.KV.Key.Name != "a" {
		t.Fatalf("first event %s %v, want the initial ADDED of a", ev.Type, ev.KV.Key)
	}
	if _, err := s.Create(ctx, key("b"), sa("b"), storage.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = next(t, w)
	if ev.Type != watchcache.Added || ev.KV.Key.Name != "b" {
		t.Fatalf("event %s %v, want ADDED b", ev.Type, ev.KV.Key)
	}
	watched, err := ev.Object()
	if err != nil {
		t.Fatal(err)
	}
	// The one object cache: the watch cache's object for a version is the
	// store's shared decoded object of that version, not a copy.
	shared, err := s.DecodeShared(ev.KV)
	if err != nil {
		t.Fatal(err)
	}
	if watched != shared {
		t.Fatal("the watch cache holds its own decoded copy of a stored version")
	}
	if got := watched.(*api.ServiceAccount).ResourceVersion; got == "" {
		t.Fatal("a watched object carries no resourceVersion")
	}
}

func TestWatchSelectsWithThePredicate(t *testing.T) {
	ctx := context.Background()
	s, _ := newWatchedStore(t, nil)
	onlyB := func(obj runtime.Object) (bool, error) { return obj.(*api.ServiceAccount).Name == "b", nil }
	w, err := s.Watch(ctx, nsPrefix, onlyB, &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.Create(ctx, key(name), sa(name), storage.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if ev := next(t, w); ev.KV.Key.Name != "b" {
		t.Fatalf("event for %q, want only b", ev.KV.Key.Name)
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %s %v", ev.Type, ev.KV.Key)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestWatchRefusals(t *testing.T) {
	ctx := context.Background()
	// A window of one event: a watch from the first write is too old once
	// two more have been applied.
	wcfg := watchcache.DefaultConfig()
	wcfg.MaxEvents = 1
	s, l := newWatchedStore(t, wcfg)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.Create(ctx, key(name), sa(name), storage.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unwatched, err := storage.New(nil, l)
	if err != nil {
		t.Fatal(err)
	}
	noWatches := unwatched.MustForResource(t, storage.ResourceConfig{
		GVR: sasGVR, Codec: registry.StorageCodec(sasGVR.GroupVersion()), Convertor: registry.Scheme,
		NewFunc: func() runtime.Object { return &api.ServiceAccount{} },
	})
	tests := []struct {
		name string
		s    *storage.Store
		rv   string
		code int32
	}{
		{"a malformed resourceVersion is 400", s, "x", http.StatusBadRequest},
		{"a start before the window is 410, for an ERROR event", s, "1", http.StatusGone},
		{"a node without a watch cache answers 405", noWatches, "0", http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := tc.s.Watch(ctx, nsPrefix, nil, &metainternalversion.ListOptions{ResourceVersion: tc.rv})
			if w != nil {
				w.Stop()
				t.Fatal("a refused watch returned a watcher")
			}
			wantStatus(t, err, tc.code, "")
			if tc.code == http.StatusGone && !apierrors.IsResourceExpired(err) {
				t.Fatalf("410 is not ResourceExpired: %v", err)
			}
		})
	}
}
