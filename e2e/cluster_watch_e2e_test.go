package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// TestWatchResumesOnAnotherNode: a client that watched on one node and
// resumes from its last resourceVersion on another node sees every later
// change exactly once, in order.
func TestWatchResumesOnAnotherNode(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := context.Background()
	writer := nodes[0].clientset()
	start, err := createSA(writer, "resume-start")
	if err != nil {
		t.Fatal(err)
	}
	const total = 30
	for i := 0; i < total; i++ {
		if _, err := createSA(writer, fmt.Sprintf("resume-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Read the first half on node 1.
	w1, err := nodes[1].clientset().CoreV1().ServiceAccounts("default").Watch(ctx, metav1.ListOptions{ResourceVersion: start.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for i := 0; i < total/2; i++ {
		sa := wantEvent(t, w1, watch.Added, fmt.Sprintf("resume-%02d", i))
		last = sa.ResourceVersion
	}
	w1.Stop()
	// Resume on node 2 from the last resourceVersion seen.
	w2, err := nodes[2].clientset().CoreV1().ServiceAccounts("default").Watch(ctx, metav1.ListOptions{ResourceVersion: last})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	for i := total / 2; i < total; i++ {
		wantEvent(t, w2, watch.Added, fmt.Sprintf("resume-%02d", i))
	}
	if _, err := createSA(writer, "resume-live"); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, w2, watch.Added, "resume-live")
}

// TestInformerThroughLeaderKill: an informer on a follower stays in sync
// while the leader is killed and writes move to the new leader.
func TestInformerThroughLeaderKill(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	followers := followersOf(nodes, leader)
	watched, writerNode := followers[0], followers[1]

	factory := informers.NewSharedInformerFactoryWithOptions(watched.clientset(), 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ServiceAccounts().Informer()
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("informer did not sync")
	}

	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		wg    sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		cs := writerNode.clientset()
		for i := 0; i < 5000; i++ {
			select {
			case <-done:
				return
			default:
			}
			name := fmt.Sprintf("inf-kill-%d", i)
			if _, err := createSA(cs, name); err == nil {
				mu.Lock()
				acked[name] = true
				mu.Unlock()
			}
		}
	}()
	time.Sleep(time.Second)
	leader.kill()
	time.Sleep(4 * time.Second)
	close(done)
	wg.Wait()

	list, err := watched.clientset().CoreV1().ServiceAccounts("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		have := map[string]string{}
		for _, o := range inf.GetStore().List() {
			sa := o.(*corev1.ServiceAccount)
			have[sa.Name] = sa.ResourceVersion
		}
		missing := ""
		for _, sa := range list.Items {
			if have[sa.Name] != sa.ResourceVersion {
				missing = sa.Name
				break
			}
		}
		mu.Lock()
		for name := range acked {
			if _, ok := have[name]; !ok && missing == "" {
				missing = name
			}
		}
		n := len(acked)
		mu.Unlock()
		if missing == "" && len(have) == len(list.Items) {
			t.Logf("informer holds all %d service accounts (%d acknowledged writes across the leader kill)", len(have), n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("informer out of sync after 20s: missing or stale %q; informer has %d, server lists %d", missing, len(have), len(list.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
