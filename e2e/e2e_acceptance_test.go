package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/e2e/acceptance"
)

// acceptanceControllerEnv turns the test binary into an acceptance
// controller process (TestMain), named by its value, on the kubeconfig
// in leaseKubeconfigEnv. It exits by itself after acceptanceLife.
const (
	acceptanceControllerEnv = "TRUSTPLANE_E2E_ACCEPTANCE_CONTROLLER"
	acceptanceLife          = 4 * time.Minute
	acceptanceLease         = "acceptance-controller"
)

func runAcceptanceController(id string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(leaseKubeconfigEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 2
	}
	cfg.Timeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), acceptanceLife)
	defer cancel()
	err = acceptance.Run(ctx, acceptance.Config{
		REST: cfg, Identity: id, Namespace: "default", LeaseName: acceptanceLease,
		LeaseDuration: leaseDuration, RenewDeadline: leaseRenewDeadline, RetryPeriod: leaseRetryPeriod,
		Out: os.Stdout,
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	return 0
}

// controllerProcess is a running acceptance controller.
type controllerProcess struct {
	cmd     *exec.Cmd
	leading chan struct{}
	mu      sync.Mutex
	issued  map[string]bool
}

func startAcceptanceController(t *testing.T, id string, n *node) *controllerProcess {
	t.Helper()
	c := &controllerProcess{leading: make(chan struct{}), issued: map[string]bool{}}
	c.cmd = startHelperProcess(t, []string{acceptanceControllerEnv + "=" + id, leaseKubeconfigEnv + "=" + n.kubeconfigPath()}, func(line string) {
		switch {
		case line == "LEADING "+id:
			close(c.leading)
		case strings.HasPrefix(line, "ISSUED "):
			c.mu.Lock()
			c.issued[strings.TrimPrefix(line, "ISSUED ")] = true
			c.mu.Unlock()
		}
	})
	return c
}

// issuedKeys are the requests (namespace/name) the process issued.
func (c *controllerProcess) issuedKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.issued {
		out = append(out, k)
	}
	return out
}

func (c *controllerProcess) issuedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.issued)
}

// TestE2EAcceptanceController: a controller built from client-go's parts
// alone (e2e/acceptance: a Lease-elected process, a dynamic informer, a
// workqueue, events) runs on a 3-node cluster against a custom resource,
// turning IdentityRequests into ServiceAccounts with tokens it checks by
// TokenReview. Mid-run the trustplane leader is killed, and later the
// controller holding the Lease: every request still ends Issued, its
// status names its ServiceAccount, the controller's events are stored,
// the standby takes over the Lease, and deleting a request deletes its
// ServiceAccount (issue 17 point 5).
func TestE2EAcceptanceController(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	followers := followersOf(nodes, leader)
	p := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(p, []byte(acceptance.CRD), 0o600); err != nil {
		t.Fatal(err)
	}
	followers[0].mustKubectl("apply", "-f", p)
	followers[0].mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/identityrequests.acceptance.example.com")

	a := startAcceptanceController(t, "a", followers[0])
	select {
	case <-a.leading:
	case <-time.After(60 * time.Second):
		t.Fatal("controller a did not start leading within 60s")
	}
	b := startAcceptanceController(t, "b", followers[1])

	ctx := context.Background()
	dyn := followers[1].dynamicClient()
	requests := dyn.Resource(acceptance.IdentityRequests).Namespace("default")
	create := func(i int) {
		t.Helper()
		req := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "acceptance.example.com/v1", "kind": "IdentityRequest",
			"metadata": map[string]interface{}{"name": fmt.Sprintf("idr-%02d", i)},
			"spec":     map[string]interface{}{"serviceAccount": fmt.Sprintf("robot-%02d", i), "audiences": []interface{}{"vault"}},
		}}
		var err error
		for attempt := 0; attempt < 30; attempt++ {
			if _, err = requests.Create(ctx, req, metav1.CreateOptions{}); err == nil || strings.Contains(err.Error(), "already exists") {
				return
			}
			time.Sleep(time.Second) // a killed leader: the write is retried
		}
		t.Fatalf("create %s: %v", req.GetName(), err)
	}
	const total = 20
	for i := 0; i < total/2; i++ {
		create(i)
	}
	waitFor(t, 60*time.Second, "the first requests to be issued", func() bool { return a.issuedCount() >= 3 })
	leader.kill() // the trustplane leader, mid-run
	for i := total / 2; i < total; i++ {
		create(i)
	}
	// The Lease holder dies without releasing; b takes over.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.leading:
	case <-time.After(90 * time.Second):
		t.Fatal("controller b did not take the Lease within 90s of a's death")
	}
	issued := func() (int, string) {
		list, err := requests.List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err.Error()
		}
		n, pending := 0, ""
		for _, r := range list.Items {
			if phase, _, _ := unstructured.NestedString(r.Object, "status", "phase"); phase == "Issued" {
				n++
			} else {
				pending = r.GetName()
			}
		}
		return n, pending
	}
	waitFor(t, 90*time.Second, "every request to be issued", func() bool { n, _ := issued(); return n == total })
	if n, pending := issued(); n != total {
		t.Fatalf("%d of %d issued; %s is not", n, total, pending)
	}

	// Each status names its ServiceAccount, which the request owns.
	cs := followers[1].clientset()
	list, err := requests.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		account, _, _ := unstructured.NestedString(r.Object, "spec", "serviceAccount")
		uid, _, _ := unstructured.NestedString(r.Object, "status", "serviceAccountUID")
		user, _, _ := unstructured.NestedString(r.Object, "status", "username")
		sa, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, account, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", r.GetName(), err)
		}
		if string(sa.UID) != uid || user != "system:serviceaccount:default:"+account {
			t.Fatalf("%s: status uid %s user %s, ServiceAccount uid %s", r.GetName(), uid, user, sa.UID)
		}
		if len(sa.OwnerReferences) != 1 || sa.OwnerReferences[0].UID != r.GetUID() {
			t.Fatalf("%s's ServiceAccount owners: %+v", r.GetName(), sa.OwnerReferences)
		}
	}
	// The controller's events are stored, about the requests. client-go
	// sends them after the fact and in the background, best effort as
	// kube's events are: those a had not sent when it was killed are
	// lost with it, so every request b issued has its event (within a
	// bound), and a's are there in part at least.
	var evs *eventsv1.EventList
	missing := ""
	waitFor(t, 30*time.Second, "an Issued event for every request b issued", func() bool {
		if evs, err = cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=Issued"}); err != nil {
			return false
		}
		about := map[string]bool{}
		for _, ev := range evs.Items {
			about["default/"+ev.Regarding.Name] = true
		}
		missing = ""
		for _, key := range b.issuedKeys() {
			if !about[key] {
				missing = key
			}
		}
		return missing == "" && len(evs.Items) > len(b.issuedKeys())
	})
	if evs.Items[0].Regarding.Kind != "IdentityRequest" || evs.Items[0].ReportingController != "acceptance-controller" {
		t.Fatalf("%d Issued events; first %+v", len(evs.Items), evs.Items[0])
	}
	// The Lease changed hands once at least.
	l, err := cs.CoordinationV1().Leases("default").Get(ctx, acceptanceLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "b" || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions < 1 {
		t.Fatalf("lease: %+v", l.Spec)
	}
	// The transition rule keeps serviceAccount immutable.
	out, err := followers[1].kubectl("patch", "idr", "idr-00", "--type=merge", "-p", `{"spec":{"serviceAccount":"other"}}`)
	if err == nil || !strings.Contains(out, "serviceAccount is immutable") {
		t.Fatalf("changing serviceAccount: %v\n%s", err, out)
	}
	// Deleting a request deletes its ServiceAccount.
	if err := requests.Delete(ctx, "idr-00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "robot-00 to be garbage collected", func() bool {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "robot-00", metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found")
	})
}
