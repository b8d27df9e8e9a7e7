package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/api/caroots"
	"github.com/trustplane/trustplane/certs"
)

// TestRedteamE2ENodeCARestartFromOldSnapshot (docs/REDTEAM-node-ca.md NCA-1): a
// follower whose latest Raft snapshot was taken before the node CA
// rotation is restarted after finish. raft restores that snapshot (the
// record: the old CA active alone) and, until a leader tells it the commit
// index, CommitIndex is 0, so cluster.Node.CheckCaughtUp says "caught up".
// caroots.Store.Run then trusts exactly the snapshot's CAs (drops the new
// one, rewrites node-trust.pem with the old CA alone) and reissues its
// certificate from the retired CA: the node refuses the leader's
// certificate and presents one every peer refuses. It never rejoins, and
// a restart does not help (its trust file now names the old CA alone).
func TestRedteamE2ENodeCARestartFromOldSnapshot(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	nodes := startCluster(t, 3, "--raft-snapshot-threshold", "200", "--raft-snapshot-interval", "1s")
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	cs := leader.clientset()
	oldCA, err := certs.LoadNodeCA(leader.caDir)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the node CAs seeded", func() bool {
		out, err := leader.rotate("node-ca", "status")
		return err == nil && strings.Contains(out, certs.CertID(oldCA.Cert))
	})
	cm, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-rotation"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot on the follower that holds the seeded record only.
	waitSnapshot(t, f, cs, cm.ResourceVersion)

	newCA, err := certs.NewNodeCA()
	if err != nil {
		t.Fatal(err)
	}
	bundle, _ := newCA.PEM()
	bundleFile := filepath.Join(t.TempDir(), "new.pem")
	if err := os.WriteFile(bundleFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	leader.mustRotate(t, "node-ca", "start", "--key-file", bundleFile)
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := leader.rotate("node-ca", "promote"); return err == nil })
	waitFor(t, 60*time.Second, "finish", func() bool { _, err := leader.rotate("node-ca", "finish"); return err == nil })
	snaps, _ := filepath.Glob(filepath.Join(f.dir, "raft", "snapshots", "*"))
	t.Logf("follower %s snapshots after finish: %v", f.name, snaps)

	// Down long enough that the leader's replication to it backs off
	// (hashicorp/raft: up to ~10 s), as after any real outage.
	f.stop()
	time.Sleep(20 * time.Second)
	f.start()

	ok := false
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", f.raftAddr, time.Second); err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		} else {
			c.Close()
		}
		presented, accepted := raftProbe(t, f, newCA)
		if presented == newCA && accepted {
			if _, stillOld := raftProbe(t, f, oldCA); !stillOld {
				ok = true
				break
			}
		}
		time.Sleep(time.Second)
	}
	trust, _, _ := caroots.LoadTrust(filepath.Join(f.dir, "node-trust.pem"))
	var ids []string
	for _, c := range trust {
		ids = append(ids, certs.CertID(c))
	}
	for _, l := range strings.Split(f.fullLog(), "\n") {
		if strings.Contains(l, "node-cas") || strings.Contains(l, "restored from snapshot") || strings.Contains(l, "entering follower") {
			t.Log(l)
		}
	}
	if !ok {
		presented, accepted := raftProbe(t, f, newCA)
		t.Fatalf("60 s after the restart %s presents a certificate of the new CA: %v, accepts one: %v; node-trust.pem: %v (new CA %s, old CA %s)\n%s",
			f.name, presented == newCA, accepted, ids, certs.CertID(newCA.Cert), certs.CertID(oldCA.Cert), f.logTail())
	}
}

// TestRedteamE2ENodeCAForwardAfterFinish (docs/REDTEAM-node-ca.md NCA-2): a
// follower's forwarder keeps its HTTP/2 connection to the leader's API
// open as long as writes flow (idle timeout 90 s). That connection was
// made with the follower's certificate of the old node CA. After finish
// the leader no longer counts its chain as a node's (api.Server.fromNode
// checks VerifiedChains against the live node CAs), so it ignores the
// X-Remote-* headers and serves the forwarded write as the user
// "system:trustplane-node:<name>", which may do nothing: every write
// through that follower fails (403) until the connection idles out.
func TestRedteamE2ENodeCAForwardAfterFinish(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	oldCA, err := certs.LoadNodeCA(leader.caDir)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the node CAs seeded", func() bool {
		out, err := leader.rotate("node-ca", "status")
		return err == nil && strings.Contains(out, certs.CertID(oldCA.Cert))
	})
	cs := f.clientset()
	write := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fwd-%04d", i)}}, metav1.CreateOptions{})
		return err
	}
	// The forwarder's connection to the leader, made with the old CA's certificate.
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // keeps that connection busy (bounded: 2000 writes)
		defer close(done)
		for i := 1; i < 2000; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_ = write(i)
		}
	}()
	leader.mustRotate(t, "node-ca", "start")
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := leader.rotate("node-ca", "promote"); return err == nil })
	waitFor(t, 60*time.Second, "finish", func() bool { _, err := leader.rotate("node-ca", "finish"); return err == nil })
	time.Sleep(2 * time.Second)
	var failed []string
	for i := 5000; i < 5020; i++ {
		if err := write(i); err != nil {
			failed = append(failed, err.Error())
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	<-done
	if len(failed) > 0 {
		t.Fatalf("%d of 20 writes through follower %s failed after finish, first: %s", len(failed), f.name, failed[0])
	}
}

// rpcStats sends one internal RPC stats request on conn (the marker byte
// already sent) and reads the answer.
func rpcStats(conn net.Conn) error {
	body := []byte(`{"op":"stats"}`)
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(frame); err != nil {
		return err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > 1<<20 {
		return fmt.Errorf("frame of %d bytes", n)
	}
	_, err := io.ReadFull(conn, make([]byte, n))
	return err
}

// TestRedteamE2ENodeCAOldConnAfterFinish (docs/REDTEAM-node-ca.md NCA-3): the
// node CA is rotated because its key may have leaked; whoever holds it
// opens a connection to a node's Raft port before finish (internal RPC
// here; a raft connection is served the same way) and keeps it busy.
// After finish that connection is still served: the chain is checked at
// the handshake only, and nothing closes connections whose certificate
// the node no longer trusts. The caller keeps the name its old
// certificate gave it (remove_server is honoured for that name).
func TestRedteamE2ENodeCAOldConnAfterFinish(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	oldCA, err := certs.LoadNodeCA(leader.caDir)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the node CAs seeded", func() bool {
		out, err := leader.rotate("node-ca", "status")
		return err == nil && strings.Contains(out, certs.CertID(oldCA.Cert))
	})
	certPEM, keyPEM, err := oldCA.Issue(certs.NodeRequest("intruder"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", f.raftAddr, &tls.Config{
		Certificates: []tls.Certificate{pair}, ServerName: certs.NodeServerName,
		InsecureSkipVerify: true, MinVersion: tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{0xA7}); err != nil {
		t.Fatal(err)
	}
	if err := rpcStats(conn); err != nil {
		t.Fatalf("the old CA's certificate is refused before the rotation: %v", err)
	}
	leader.mustRotate(t, "node-ca", "start")
	_ = rpcStats(conn)
	waitFor(t, 30*time.Second, "promote", func() bool { _, err := leader.rotate("node-ca", "promote"); return err == nil })
	_ = rpcStats(conn)
	waitFor(t, 60*time.Second, "finish", func() bool { _ = rpcStats(conn); _, err := leader.rotate("node-ca", "finish"); return err == nil })
	// A new handshake with the old CA's certificate is refused, once the
	// follower has applied finish (the step answers when the leader has)...
	waitFor(t, 10*time.Second, "a new connection with the old CA's certificate refused after finish", func() bool {
		_, accepted := raftProbe(t, f, oldCA)
		return !accepted
	})
	// ...but the connection made before is still served.
	time.Sleep(2 * time.Second)
	if err := rpcStats(conn); err == nil {
		t.Fatalf("after finish %s still answers the internal RPC on a connection authenticated by the removed node CA", f.name)
	}
}
