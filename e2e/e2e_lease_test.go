package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaseCandidateEnv turns the test binary into a leader-election candidate
// (TestMain): its value is the candidate's identity. The candidate reads
// the kubeconfig in leaseKubeconfigEnv and holds the Lease
// default/e2e-election with client-go's leader election, printing
// "LEADING <id>" when it starts leading. It exits by itself after
// leaseCandidateLife, so a candidate a test forgets cannot outlive it long.
const (
	leaseCandidateEnv  = "TRUSTPLANE_E2E_LEASE_CANDIDATE"
	leaseKubeconfigEnv = "TRUSTPLANE_E2E_LEASE_KUBECONFIG"
	leaseCandidateLife = 3 * time.Minute
	leaseName          = "e2e-election"
	leaseDuration      = 6 * time.Second
	leaseRenewDeadline = 4 * time.Second
	leaseRetryPeriod   = time.Second
)

// runLeaseCandidate is a candidate process's whole life.
func runLeaseCandidate(id string) int {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(leaseKubeconfigEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 2
	}
	cfg.Timeout = 3 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseCandidateLife)
	defer cancel()
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: leaseName},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration: leaseDuration,
		RenewDeadline: leaseRenewDeadline,
		RetryPeriod:   leaseRetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Println("LEADING", id)
				<-ctx.Done()
			},
			OnStoppedLeading: func() { fmt.Println("STOPPED", id) },
		},
	})
	return 0
}

// candidate is a running candidate process.
type candidate struct {
	cmd     *exec.Cmd
	leading chan struct{} // closed when it prints LEADING
}

func startCandidate(t *testing.T, id string, n *node) *candidate {
	t.Helper()
	c := &candidate{leading: make(chan struct{})}
	c.cmd = startHelperProcess(t, []string{leaseCandidateEnv + "=" + id, leaseKubeconfigEnv + "=" + n.kubeconfigPath()}, func(line string) {
		if line == "LEADING "+id {
			close(c.leading)
		}
	})
	return c
}

// startHelperProcess runs the test binary as a helper process (TestMain
// reads env), hands each line it prints to onLine, and kills it when the
// test ends.
func startHelperProcess(t *testing.T, env []string, onLine func(line string)) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			onLine(sc.Text())
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestLeaseLeaderElection: client-go's leader election between two
// processes on a 3-node cluster. The holder renews through one follower;
// the other candidate waits through another and never takes the Lease
// while it is held. Then the holder and the trustplane leader are killed
// at once: the waiting candidate takes the Lease once it expires, through
// the cluster's new leader (issue 17 point 4).
func TestLeaseLeaderElection(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	followers := followersOf(nodes, leader)
	ctx := context.Background()
	watcher := followers[1].clientset()
	holder := func() string {
		l, err := watcher.CoordinationV1().Leases("default").Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	a := startCandidate(t, "a", followers[0])
	select {
	case <-a.leading:
	case <-time.After(60 * time.Second):
		t.Fatal("candidate a did not start leading within 60s")
	}
	if h := holder(); h != "a" {
		t.Fatalf("holderIdentity %q, want a", h)
	}
	b := startCandidate(t, "b", followers[1])
	// Two lease durations of a held Lease: b must keep waiting.
	select {
	case <-b.leading:
		t.Fatal("candidate b took a Lease that a holds and renews")
	case <-time.After(2 * leaseDuration):
	}
	if h := holder(); h != "a" {
		t.Fatalf("holderIdentity %q while a renews, want a", h)
	}

	// The holder dies without releasing, with the trustplane leader.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	leader.kill()
	killed := time.Now()
	select {
	case <-b.leading:
	case <-time.After(90 * time.Second):
		t.Fatalf("candidate b did not take the Lease within 90s of the kills (holder %q)", holder())
	}
	t.Logf("b leads %v after the kills (lease duration %v)", time.Since(killed).Round(100*time.Millisecond), leaseDuration)
	l, err := watcher.CoordinationV1().Leases("default").Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "b" || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions < 1 {
		t.Fatalf("lease after the failover: %+v", l.Spec)
	}
	// kubectl reads Leases too (kube's printer).
	if out := followers[1].mustKubectl("get", "leases", "-n", "default", leaseName); !strings.Contains(out, "HOLDER") || !strings.Contains(out, " b ") {
		t.Errorf("kubectl get leases:\n%s", out)
	}
}

// TestLeaseRules: kube's validation of a Lease, and create on update as
// client-go's lock relies on.
func TestLeaseRules(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	leases := n.clientset().CoordinationV1().Leases("default")
	bad := int32(-1)
	_, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &bad},
	}, metav1.CreateOptions{})
	wantAPIError(t, err, 422, metav1.StatusReasonInvalid, `Lease.coordination.k8s.io "bad" is invalid: spec.leaseDurationSeconds: Invalid value: -1: must be greater than 0`)
	id, dur := "me", int32(10)
	up, err := leases.Update(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "made-by-update"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &dur},
	}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update of a missing lease: %v", err)
	}
	if up.ResourceVersion == "" || *up.Spec.HolderIdentity != "me" {
		t.Fatalf("created by update: %+v", up)
	}
	if _, err := leases.Get(ctx, "made-by-update", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}
