package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestHundredWatchersSeeOneSequence: 100 watchers started at successive
// resourceVersions while a writer creates, updates and deletes each see
// exactly the suffix of one event sequence after their start: no gap, no
// duplicate, the same order.
func TestHundredWatchersSeeOneSequence(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "seq"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sas := cs.CoreV1().ServiceAccounts("seq")
	// The ServiceAccount controller adds "default" to the new namespace on
	// its own schedule; let it, so its event is not among the writer's.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := sas.Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the namespace's default ServiceAccount never appeared: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The writer: creates, updates and deletes, recording every change as
	// "TYPE name rv" in log order.
	type change struct {
		typ  watch.EventType
		name string
		rv   string
	}
	var log []change
	write := func(i int) {
		name := fmt.Sprintf("s-%d", i%17)
		cur, err := sas.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, change{watch.Added, name, sa.ResourceVersion})
		case i%3 == 0:
			if err := sas.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// The deletion's resourceVersion is the next event's; read it
			// from the watch below by position.
			log = append(log, change{watch.Deleted, name, ""})
		default:
			cur.Labels = map[string]string{"i": strconv.Itoa(i)}
			sa, err := sas.Update(ctx, cur, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, change{watch.Modified, name, sa.ResourceVersion})
		}
	}

	// Start a watcher after each of the first 100 changes, from the
	// resourceVersion the list reports then.
	const watchers = 100
	type started struct {
		w     watch.Interface
		after int // how many changes of log precede its start
	}
	var ws []started
	for i := 0; i < watchers; i++ {
		write(i)
		list, err := sas.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := sas.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, started{w, len(log)})
	}
	for i := watchers; i < watchers+60; i++ {
		write(i)
	}

	for wi, s := range ws {
		want := log[s.after:]
		lastRV := uint64(0)
		for k, c := range want {
			var ev watch.Event
			select {
			case ev = <-s.w.ResultChan():
			case <-time.After(15 * time.Second):
				t.Fatalf("watcher %d: event %d of %d missing", wi, k, len(want))
			}
			sa, ok := ev.Object.(*corev1.ServiceAccount)
			if !ok || ev.Type != c.typ || sa.Name != c.name || (c.rv != "" && sa.ResourceVersion != c.rv) {
				t.Fatalf("watcher %d event %d: %s %v, want %s %s rv %s", wi, k, ev.Type, ev.Object, c.typ, c.name, c.rv)
			}
			rv, _ := strconv.ParseUint(sa.ResourceVersion, 10, 64)
			if rv <= lastRV {
				t.Fatalf("watcher %d: resourceVersion %d after %d", wi, rv, lastRV)
			}
			lastRV = rv
		}
		select {
		case ev := <-s.w.ResultChan():
			t.Fatalf("watcher %d: unexpected extra event %s %v", wi, ev.Type, ev.Object)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
