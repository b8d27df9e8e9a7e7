package e2e_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatchSharedEncoding: watchers of the same change in different formats
// (JSON twice, protobuf twice, a label-selected JSON watch that sees an
// update as DELETED) each get the event in their own format, with the
// event's resourceVersion, although the server encodes each event once per
// format and shares the bytes.
func TestWatchSharedEncoding(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	js, pb := n.clientset(), n.protoClientset()
	sa, err := js.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "shared", Labels: map[string]string{"k": "v"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{ResourceVersion: sa.ResourceVersion}
	selOpts := metav1.ListOptions{ResourceVersion: sa.ResourceVersion, LabelSelector: "k=v"}
	var watchers []watch.Interface
	for _, o := range []struct {
		proto bool
		opts  metav1.ListOptions
	}{{false, opts}, {false, opts}, {true, opts}, {true, opts}, {false, selOpts}} {
		cs := js
		if o.proto {
			cs = pb
		}
		w, err := cs.CoreV1().ServiceAccounts("default").Watch(ctx, o.opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		watchers = append(watchers, w)
	}
	sa.Labels = map[string]string{"k": "other"}
	up, err := js.CoreV1().ServiceAccounts("default").Update(ctx, sa, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range watchers {
		wantType, wantLabel := watch.Modified, "other"
		if i == len(watchers)-1 {
			// The selected watcher sees the object leave: DELETED with
			// the previous version at the update's resourceVersion.
			wantType, wantLabel = watch.Deleted, "v"
		}
		got := wantEvent(t, w, wantType, "shared")
		if got.ResourceVersion != up.ResourceVersion || got.Labels["k"] != wantLabel || got.UID != sa.UID {
			t.Fatalf("watcher %d: %s rv %s labels %v, want rv %s label %s", i, wantType, got.ResourceVersion, got.Labels, up.ResourceVersion, wantLabel)
		}
	}
}
