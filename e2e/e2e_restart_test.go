package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var allResources = []string{"namespaces", "serviceaccounts", "secrets", "configmaps", "pods", "podtemplates", "services"}

// TestRestartKeepsData stops the node gracefully and starts it again: every
// object is there with its resourceVersion, and new writes get higher ones.
func TestRestartKeepsData(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "keep"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := cs.CoreV1().ServiceAccounts("keep").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("keep").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("keep").Create(ctx, minimalPod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("keep").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "2"
	if cm, err = cs.CoreV1().ConfigMaps("keep").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("keep").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := n.snapshot(t, allResources...)
	var highest uint64
	for _, rv := range before {
		var v uint64
		fmt.Sscan(rv, &v)
		highest = max(highest, v)
	}

	n.restart()

	sameSnapshot(t, before, n.snapshot(t, allResources...))
	cs = n.clientset()
	got, err := cs.CoreV1().ServiceAccounts("keep").Get(ctx, "sa", metav1.GetOptions{})
	if err != nil || got.UID != sa.UID || !got.CreationTimestamp.Equal(&sa.CreationTimestamp) {
		t.Fatalf("after restart: %v %+v", err, got)
	}
	gotCM, err := cs.CoreV1().ConfigMaps("keep").Get(ctx, "cm", metav1.GetOptions{})
	if err != nil || gotCM.Data["v"] != "2" || gotCM.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("updated configmap after restart: %v %+v", err, gotCM)
	}
	next, err := cs.CoreV1().ConfigMaps("keep").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rvOf(t, next) <= highest {
		t.Fatalf("write after restart got resourceVersion %s, not above %d", next.ResourceVersion, highest)
	}
	// A conflict check across the restart still uses the same versions.
	gotCM.Data["v"] = "3"
	if _, err := cs.CoreV1().ConfigMaps("keep").Update(ctx, gotCM, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update with the resourceVersion read before the restart: %v", err)
	}
	if out := n.mustKubectl("get", "sa", "sa", "-n", "keep", "-o", "name"); out != "serviceaccount/sa" {
		t.Fatalf("kubectl after restart: %q", out)
	}
}

// TestKillKeepsAcknowledgedWrites SIGKILLs the node while clients write:
// every write it acknowledged is there after it starts again.
func TestKillKeepsAcknowledgedWrites(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cms := n.clientset().CoreV1().ConfigMaps("default")

	var (
		mu    sync.Mutex
		acked = map[string]string{} // name -> resourceVersion
		count atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				cm, err := cms.Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": name}}, metav1.CreateOptions{})
				cancel()
				if err != nil {
					return // the node is gone
				}
				mu.Lock()
				acked[name] = cm.ResourceVersion
				mu.Unlock()
				count.Add(1)
			}
		}(w)
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	// Let a good number of writes be acknowledged, then kill mid-stream.
	for count.Load() < 200 {
		select {
		case <-writersDone:
			t.Fatalf("writers stopped after %d writes:\n%s", count.Load(), n.logTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
	n.kill()
	stop.Store(true)
	<-writersDone

	n.start()
	n.waitReady(60 * time.Second)

	list, err := n.clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, cm := range list.Items {
		have[cm.Name] = cm.ResourceVersion
	}
	mu.Lock()
	defer mu.Unlock()
	for name, rv := range acked {
		got, ok := have[name]
		if !ok {
			t.Errorf("acknowledged write %s (rv %s) lost", name, rv)
		} else if got != rv {
			t.Errorf("%s: resourceVersion %s after the crash, %s acknowledged", name, got, rv)
		}
	}
	t.Logf("%d acknowledged writes survived SIGKILL (%d objects present)", len(acked), len(have))
	n.mustBeReady(t)
}
