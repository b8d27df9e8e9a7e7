package e2e_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestWatchListClient: a client-go reflector in WatchList mode (the
// WatchListClient feature) fills its store from one streaming watch
// (sendInitialEvents), without ever falling back to LIST, and then follows
// changes.
func TestWatchListClient(t *testing.T) {
	n := startNode(t)
	n.trustplaneOnly(t, "streaming lists (sendInitialEvents) are always served; kube-apiserver v1.33 serves them only with the WatchList feature gate, off by default")
	cs := n.clientset()
	for i := 0; i < 25; i++ {
		if _, err := createSA(cs, fmt.Sprintf("wl-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var lists atomic.Int32
	lw := &cache.ListWatch{
		ListFunc: func(opts metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return cs.CoreV1().ServiceAccounts("default").List(context.Background(), opts)
		},
		WatchFunc: func(opts metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ServiceAccounts("default").Watch(context.Background(), opts)
		},
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := cache.NewReflector(lw, &corev1.ServiceAccount{}, store, 0)
	r.UseWatchList = ptr.To(true)
	stop := make(chan struct{})
	defer close(stop)
	go r.Run(stop)

	waitStore := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: store holds %d objects after 15s", what, len(store.List()))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitStore("initial events", func() bool { return len(store.List()) >= 25 })
	if _, err := createSA(cs, "wl-after"); err != nil {
		t.Fatal(err)
	}
	waitStore("a change after the initial events", func() bool {
		_, ok, _ := store.GetByKey("default/wl-after")
		return ok
	})
	if got := lists.Load(); got != 0 {
		t.Fatalf("the reflector fell back to LIST %d times; the watch-list stream did not work", got)
	}
}

// TestWatchResumesAfterRestart: a client resumes a watch from a
// resourceVersion taken before the node restarted, without a 410, because
// the node rebuilds its watch window from the history it persisted.
func TestWatchResumesAfterRestart(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	before, err := createSA(cs, "before-restart")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := createSA(cs, fmt.Sprintf("pre-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	n.restart()
	cs = n.clientset()
	w, err := cs.CoreV1().ServiceAccounts("default").Watch(context.Background(), metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := 0; i < 5; i++ {
		wantEvent(t, w, watch.Added, fmt.Sprintf("pre-%d", i))
	}
	if _, err := createSA(cs, "post"); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, w, watch.Added, "post")
}
