package e2e_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/certs"
)

// raftProbe dials n's Raft port presenting a node certificate of ca and
// reports the CA-issued certificate n presents, and whether n accepted
// the probe's: a refused certificate shows on the first read (TLS 1.3),
// an accepted one waits for the first byte until the read deadline.
func raftProbe(t *testing.T, n *node, ca *certs.CA) (presented *certs.CA, accepted bool) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(certs.NodeRequest("probe"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.raftAddr, &tls.Config{
		Certificates: []tls.Certificate{pair}, ServerName: certs.NodeServerName,
		InsecureSkipVerify: true, // the test checks the chain itself, below
		MinVersion:         tls.VersionTLS13,
	})
	if err != nil {
		t.Fatalf("dial %s's Raft port: %v", n.name, err)
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	if leaf.CheckSignatureFrom(ca.Cert) == nil {
		presented = ca
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	return presented, errors.As(err, &ne) && ne.Timeout()
}

// writeThrough writes through writers in turn, one write every 50 ms, at
// most max, until the returned stop is called, or the test ends (a test
// that fails before its stop must not leave the writer running against
// nodes that are gone); stop returns the writes that failed, each with
// the node it went to.
func writeThrough(t testing.TB, writers []*node, max int, write func(n *node, i int) error) (stop func() []string) {
	quit, done := make(chan struct{}), make(chan []string)
	var (
		once   sync.Once
		failed []string
	)
	stop = func() []string {
		once.Do(func() { close(quit); failed = <-done })
		return failed
	}
	t.Cleanup(func() { stop() })
	go func() {
		var failed []string
		for i := 0; i < max; i++ {
			select {
			case <-quit:
				done <- failed
				return
			case <-time.After(50 * time.Millisecond):
			}
			n := writers[i%len(writers)]
			if err := write(n, i); err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", n.name, err))
			}
		}
		done <- failed
	}()
	return stop
}

// configMapWriter creates ConfigMap prefix-NNNN in default; one that
// exists already (a retried create) is no failure.
func configMapWriter(prefix string) func(n *node, i int) error {
	return func(n *node, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%04d", prefix, i)}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
}

// TestE2ERotateNodeCA rotates the node CA of a running three-node cluster
// online (issue 29), with the operator's new CA, under writes forwarded
// from the followers (which prove themselves to the leader with node
// certificates):
//
//   - start makes every node trust the new CA; promote makes every node
//     present a certificate of it; finish waits until every voter does,
//     then drops the old CA: a node certificate of the old CA is refused
//     on every Raft port;
//   - no write fails, the leader never changes, every member stays alive;
//   - a follower restarted afterwards, whose CA directory still holds the
//     old node CA, starts with the CAs it trusted last and rejoins;
//   - each step is an Event.
func TestE2ERotateNodeCA(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := context.Background()
	leader := leaderOf(t, nodes)
	rotate, mustRotate := nodes[0].rotate, func(args ...string) string { t.Helper(); return nodes[0].mustRotate(t, args...) }
	oldCA, err := certs.LoadNodeCA(nodes[0].caDir)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := certs.NewNodeCA()
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := newCA.PEM()
	if err != nil {
		t.Fatal(err)
	}
	bundleFile := filepath.Join(t.TempDir(), "new-node-ca.pem")
	if err := os.WriteFile(bundleFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if presented, accepted := raftProbe(t, n, oldCA); presented != oldCA || !accepted {
			t.Fatalf("before the rotation %s presents a certificate of the old CA: %v, accepts one: %v", n.name, presented != nil, accepted)
		}
	}
	waitFor(t, 30*time.Second, "the node CAs seeded", func() bool {
		out, err := rotate("node-ca", "status")
		return err == nil && strings.Contains(out, certs.CertID(oldCA.Cert))
	})

	// Writes through the whole rotation, forwarded by the followers.
	stopWrites := writeThrough(t, followersOf(nodes, leader), 600, configMapWriter("nodeca"))

	out := mustRotate("node-ca", "start", "--key-file", bundleFile)
	if !strings.Contains(out, certs.CertID(newCA.Cert)+" is pending") || strings.Contains(out, "PRIVATE KEY") {
		t.Fatalf("start:\n%s", out)
	}
	for _, n := range nodes {
		// Every node trusts the new CA once it has applied start.
		waitFor(t, 30*time.Second, n.name+" trusts the new CA", func() bool {
			_, accepted := raftProbe(t, n, newCA)
			return accepted
		})
		if presented, _ := raftProbe(t, n, newCA); presented != nil {
			t.Fatalf("after start %s presents a certificate of the new CA", n.name)
		}
	}
	waitFor(t, 30*time.Second, "every voter trusts the new CA", func() bool {
		_, err := rotate("node-ca", "promote")
		return err == nil
	})
	waitFor(t, 60*time.Second, "every voter presents a certificate of the new CA", func() bool {
		_, err := rotate("node-ca", "finish")
		return err == nil
	})
	if failed := stopWrites(); len(failed) > 0 {
		t.Fatalf("%d writes failed during the rotation, first: %s", len(failed), failed[0])
	}
	for _, n := range nodes {
		if presented, accepted := raftProbe(t, n, newCA); presented != newCA || !accepted {
			t.Fatalf("after finish %s presents a certificate of the new CA: %v, accepts one: %v", n.name, presented != nil, accepted)
		}
		if _, accepted := raftProbe(t, n, oldCA); accepted {
			t.Fatalf("after finish %s still accepts a node certificate of the old CA", n.name)
		}
	}
	if l := leaderOf(t, nodes); l != leader {
		t.Fatalf("the leader moved from %s to %s during the rotation", leader.name, l.name)
	}
	for _, n := range nodes {
		ms, err := n.members()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Status != "alive" {
				t.Fatalf("%s sees %s %s after the rotation", n.name, m.Name, m.Status)
			}
		}
	}

	// A follower restarted with the old CA directory rejoins.
	follower := followersOf(nodes, leader)[0]
	follower.stop()
	follower.start()
	follower.waitReady(60 * time.Second)
	if _, err := createSA(follower.clientset(), "after-node-ca"); err != nil {
		t.Fatalf("a write through the restarted follower: %v", err)
	}
	if presented, _ := raftProbe(t, follower, newCA); presented != newCA {
		t.Fatal("the restarted follower presents no certificate of the new CA")
	}

	waitFor(t, 30*time.Second, "an Event per step", func() bool {
		evs, err := nodes[0].clientset().EventsV1().Events("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if strings.HasPrefix(ev.Note, "node-ca ") {
				seen[ev.Reason] = true
			}
		}
		return seen["RotationStarted"] && seen["RotationPromoted"] && seen["RotationFinished"]
	})
}
