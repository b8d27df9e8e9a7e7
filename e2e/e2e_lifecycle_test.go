package e2e_test

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestShutdownDelay: with --shutdown-delay-duration, a SIGTERM makes
// /readyz fail at once while the node goes on serving everything else
// (/livez, /healthz, writes, watches); a second SIGTERM ends the delay, and
// the node's watches then end cleanly, without an ERROR event.
func TestShutdownDelay(t *testing.T) {
	// The delay is far longer than the test: only the second signal can
	// end it within the bound below.
	n := startNode(t, "--controllers=false", "--shutdown-delay-duration", "90s")
	n.needsProcess("signals its process")
	ctx := context.Background()
	cms := n.clientset().CoreV1().ConfigMaps("default")
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	n.mu.Lock()
	proc, done := n.cmd.Process, n.done
	n.mu.Unlock()
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c := n.httpClient()
	waitFor(t, 15*time.Second, "/readyz to fail after SIGTERM", func() bool {
		r := do(t, c, http.MethodGet, n.url()+"/readyz?verbose", nil, nil)
		return r.code == http.StatusInternalServerError && strings.Contains(string(r.body), "[-]shutdown failed")
	})
	for _, p := range []string{"/livez", "/healthz"} {
		if r := do(t, c, http.MethodGet, n.url()+p, nil, nil); r.code != http.StatusOK {
			t.Fatalf("%s during the shutdown delay: %d %s", p, r.code, r.body)
		}
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during-delay"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a write during the shutdown delay: %v", err)
	}
	if ev := nextEvent(t, w); ev.Type != watch.Added {
		t.Fatalf("the watch during the delay: %s %#v", ev.Type, ev.Object)
	}

	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a second SIGTERM did not end the shutdown delay")
	}
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("the watch got %s %#v at shutdown, want its end", ev.Type, ev.Object)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the watch did not end when the node stopped")
	}
	if log := n.fullLog(); strings.Contains(log, "panic") {
		t.Fatalf("the node panicked:\n%s", log)
	}
}
