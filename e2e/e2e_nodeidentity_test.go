package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/fsm"
)

// TestNodeIdentityCannotBeMinted performs the attack that a shared CA made
// possible: a user who may approve client CSRs mints a node certificate,
// then uses it on the three node-only surfaces (X-Remote-* identity
// headers, the Raft port, the internal RPC's member removal). Even a
// certificate minted directly from the cluster CA, as a misconfigured
// signer would produce, gets nowhere, and nothing changes.
func TestNodeIdentityCannotBeMinted(t *testing.T) {
	nodes := startCluster(t, 3, "--controllers=false")
	admin := nodes[0].clientset()
	ctx := context.Background()

	// eve may create and approve kube-apiserver-client CSRs.
	certRule := func(verbs []string, resources []string, names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{"certificates.k8s.io"}, Resources: resources, ResourceNames: names}
	}
	createClusterRole(t, admin, "csr-approver",
		certRule([]string{"create", "get", "list"}, []string{"certificatesigningrequests"}),
		certRule([]string{"update"}, []string{"certificatesigningrequests/approval"}),
		certRule([]string{"approve"}, []string{"signers"}, certificatesv1.KubeAPIServerClientSignerName))
	bindClusterRole(t, admin, "eve-approves", "csr-approver", userSubject("eve"))
	eve := nodes[1].userClientset(t, "eve")
	clientUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

	// Her CSR for an ordinary name goes through, so the refusals below are
	// about the subject and not about her rights.
	ok := csrObject("eve-ordinary", certificatesv1.KubeAPIServerClientSignerName, csrPEM(t, "eve"), 0, clientUsages...)
	waitFor(t, 15*time.Second, "eve's RBAC to reach every node", func() bool {
		_, err := eve.CertificatesV1().CertificateSigningRequests().Create(ctx, ok, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err)
	})
	nodeSubjects := []struct {
		name string
		cn   string
		orgs []string
	}{
		{"node organisation", "eve", []string{certs.NodeOrganization}},
		{"node common name", certs.NodeUserPrefix + "evil", nil},
		{"both", certs.NodeUserPrefix + "n1", []string{certs.NodeOrganization}},
	}
	for _, signer := range []string{certificatesv1.KubeAPIServerClientSignerName, certificatesv1.KubeAPIServerClientKubeletSignerName, "example.com/custom"} {
		for i, sub := range nodeSubjects {
			csr := csrObject("evil-"+strings.NewReplacer("/", "-", ".", "-").Replace(signer)+"-"+string(rune('a'+i)), signer, csrPEM(t, sub.cn, sub.orgs...), 0, clientUsages...)
			_, err := eve.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "trustplane node identity") {
				t.Fatalf("CSR with a %s for %s: %v, want 403 Forbidden", sub.name, signer, err)
			}
		}
	}
	list, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("CSRs stored: %d, %v; want only eve-ordinary", len(list.Items), err)
	}

	// What a signer using the cluster CA would have issued.
	forgedPEM, forgedKey, err := nodes[0].clusterCA(t).Issue(certs.NodeRequest("evil", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := tls.X509KeyPair(forgedPEM, forgedKey)
	if err != nil {
		t.Fatal(err)
	}
	before, err := nodes[0].members()
	if err != nil {
		t.Fatal(err)
	}

	// Surface 1: X-Remote-* headers, on every node. The caller stays the
	// forged certificate's own user, which may do nothing.
	for _, n := range nodes {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: n.caPool(), Certificates: []tls.Certificate{forged}},
		}}
		spoof := map[string]string{"X-Remote-User": "admin", "X-Remote-Group": "system:masters", "Content-Type": "application/json"}
		r := do(t, c, http.MethodPost, n.url()+"/api/v1/namespaces", spoof, []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"pwned"}}`))
		if r.code != http.StatusForbidden || !strings.Contains(string(r.body), certs.NodeUserPrefix+"evil") {
			t.Fatalf("%s: forged node with X-Remote headers got %d %s, want 403 for the forged user itself", n.name, r.code, r.body)
		}
		r = do(t, c, http.MethodDelete, n.url()+"/debug/trustplane/members/"+nodes[2].name, spoof, nil)
		if r.code != http.StatusForbidden {
			t.Fatalf("%s: forged node removing a member through the API got %d %s, want 403", n.name, r.code, r.body)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "pwned", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace pwned: %v, want NotFound", err)
	}

	// Surfaces 2 and 3: the Raft port, with raft's AppendEntries type byte
	// and with the internal RPC's marker, a forced removal of a voter and
	// a proposal.
	removal, _ := json.Marshal(map[string]any{"op": "remove_server", "name": nodes[2].name, "force": true})
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(removal)))
	// A proposal of a Namespace, as a node executing writes sends one.
	proposal, _ := json.Marshal(map[string]any{"op": "propose", "commands": [][]byte{(&fsm.Command{Op: fsm.OpPut,
		Key: fsm.Key{Resource: "namespaces", Name: "pwned"}, Value: []byte(`{"metadata":{"name":"pwned"}}`), MustNotExist: true}).Encode()}})
	// The same proposal as a binary frame (internal RPC version 2): byte 2,
	// the timeout, one command behind its length.
	cmd := (&fsm.Command{Op: fsm.OpPut, Key: fsm.Key{Resource: "namespaces", Name: "pwned"},
		Value: []byte(`{"metadata":{"name":"pwned"}}`), MustNotExist: true}).Encode()
	binaryProposal := binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint([]byte{2}, 1000), 1), uint64(len(cmd)))
	binaryProposal = append(binaryProposal, cmd...)
	for _, n := range nodes {
		for _, payload := range [][]byte{
			append(binary.BigEndian.AppendUint32([]byte{0xA7}, uint32(len(binaryProposal))), binaryProposal...), // internal RPC: binary propose
			{0x00, 0x83, 0xa4, 'T', 'e', 'r', 'm', 0xcd, 0xff, 0xff},                                            // AppendEntries, a msgpack term far ahead
			append(append([]byte{0xA7}, frame...), removal...),                                                  // internal RPC
			append(binary.BigEndian.AppendUint32([]byte{0xA7}, uint32(len(proposal))), proposal...),             // internal RPC: propose
		} {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.raftAddr,
				&tls.Config{Certificates: []tls.Certificate{forged}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			if err != nil {
				continue // refused during the handshake
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = conn.Write(payload)
			got, rerr := conn.Read(make([]byte, 64))
			conn.Close()
			if rerr == nil || got > 0 {
				t.Fatalf("%s: the raft port answered a forged node certificate (%d bytes)", n.name, got)
			}
		}
	}
	waitFor(t, 10*time.Second, "the refusal in a node's log", func() bool {
		return strings.Contains(nodes[0].fullLog(), "refused connection on the raft port")
	})

	// Nothing changed: same voters, same leader, and writes still work.
	after, err := nodes[0].members()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("members changed: %+v -> %+v", before, after)
	}
	for i := range before {
		if before[i].Name != after[i].Name || before[i].Voter != after[i].Voter || (before[i].RaftState == "Leader") != (after[i].RaftState == "Leader") {
			t.Fatalf("members changed: %+v -> %+v", before, after)
		}
	}
	if _, err := nodes[2].clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "still-fine"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a write after the attack: %v", err)
	}
}
