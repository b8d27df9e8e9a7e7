package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// verifiedChains verifies certPEM against every CA in cas, as crypto/tls
// does against a ClientCAs pool, and returns the chains it built (nil when
// the certificate does not verify).
func verifiedChains(t *testing.T, certPEM []byte, cas ...*CA) [][]*x509.Certificate {
	t.Helper()
	leaf, err := parseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca.Cert)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return nil
	}
	return chains
}

func TestNodeCAIsSeparateFromTheClusterCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if _, err := LoadNodeCA(dir); !errors.Is(err, ErrCANotFound) {
		t.Fatalf("LoadNodeCA on an empty dir = %v, want ErrCANotFound", err)
	}
	cluster, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	node, err := LoadOrCreateNodeCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cluster.Cert.Equal(node.Cert) || cluster.Cert.Subject.CommonName == node.Cert.Subject.CommonName {
		t.Fatalf("node CA %q is not separate from cluster CA %q", node.Cert.Subject, cluster.Cert.Subject)
	}
	again, err := LoadNodeCA(dir)
	if err != nil || !again.Cert.Equal(node.Cert) {
		t.Fatalf("LoadNodeCA = %v, %v; want the CA just created", again, err)
	}
	if got := mode(t, filepath.Join(dir, NodeCAKeyFile)); got != 0o600 {
		t.Fatalf("node CA key mode %v, want 0600", got)
	}
}

// TestNodeVerifier: only a certificate issued by the node CA with the node
// subject is a node; the subject alone, from any other CA, is nothing.
func TestNodeVerifier(t *testing.T) {
	clusterCA := mustCA(t)
	nodeCA, err := LoadOrCreateNodeCA(filepath.Join(t.TempDir(), "node"))
	if err != nil {
		t.Fatal(err)
	}
	v := NewNodeVerifier(nodeCA)
	issue := func(ca *CA, r Request) []byte {
		certPEM, _, err := ca.Issue(r)
		if err != nil {
			t.Fatal(err)
		}
		return certPEM
	}
	nodeReq := NodeRequest("n1", "10.0.0.1")
	tests := []struct {
		name     string
		chains   [][]*x509.Certificate
		wantNode string
	}{
		{"a node certificate from the node CA is that node", verifiedChains(t, issue(nodeCA, nodeReq), clusterCA, nodeCA), "n1"},
		{"the node subject from the cluster CA is not a node", verifiedChains(t, issue(clusterCA, nodeReq), clusterCA, nodeCA), ""},
		{"an admin certificate from the node CA is not a node", verifiedChains(t, issue(nodeCA, Request{CommonName: "admin", Organization: []string{"system:masters"}, Client: true}), nodeCA), ""},
		{"the node prefix without the node organisation is not a node", verifiedChains(t, issue(nodeCA, Request{CommonName: NodeUserPrefix + "n1", Client: true}), nodeCA), ""},
		{"the node organisation without the node prefix is not a node", verifiedChains(t, issue(nodeCA, Request{CommonName: "n1", Organization: []string{NodeOrganization}, Client: true}), nodeCA), ""},
		{"an empty node name is not a node", verifiedChains(t, issue(nodeCA, Request{CommonName: NodeUserPrefix, Organization: []string{NodeOrganization}, Client: true}), nodeCA), ""},
		{"no verified certificate is not a node", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := v.NodeName(tt.chains)
			if tt.wantNode == "" {
				if err == nil || !errors.Is(err, ErrNotANode) {
					t.Fatalf("NodeName = %q, %v; want ErrNotANode", got, err)
				}
				return
			}
			if err != nil || got != tt.wantNode {
				t.Fatalf("NodeName = %q, %v; want %q", got, err, tt.wantNode)
			}
		})
	}
}

// TestNodeTLS: over real TLS, the node-to-node configurations accept a node
// and refuse a node-looking certificate from the cluster CA, in both
// directions.
func TestNodeTLS(t *testing.T) {
	clusterCA := mustCA(t)
	nodeCA, err := LoadOrCreateNodeCA(filepath.Join(t.TempDir(), "node"))
	if err != nil {
		t.Fatal(err)
	}
	v := NewNodeVerifier(nodeCA)
	pair := func(ca *CA, name string) tls.Certificate {
		certPEM, keyPEM, err := ca.Issue(NodeRequest(name))
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, forged := pair(nodeCA, "n1"), pair(clusterCA, "n2")
	tests := []struct {
		name           string
		server, client tls.Certificate
		ok             bool
	}{
		{"node to node", good, good, true},
		{"a forged client is refused", good, forged, false},
		{"a forged server is refused", forged, good, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", v.PeerTLS(NewNodeCert(tt.server)))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			serverName := make(chan string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					serverName <- ""
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err != nil {
					serverName <- ""
					return
				}
				name, _ := v.ConnNodeName(c)
				serverName <- name
			}()
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), v.PeerTLS(NewNodeCert(tt.client)))
			if err == nil {
				// TLS 1.3: a refused client certificate shows on the
				// first read, after the server's verdict.
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			got := <-serverName
			if tt.ok && got != "n1" {
				t.Fatalf("server saw node %q (client err %v), want n1", got, err)
			}
			if !tt.ok && got != "" {
				t.Fatalf("server accepted node %q, want a refusal", got)
			}
		})
	}
}

// handshake runs one node-to-node handshake between a listener that
// presents server and a dialer that presents client, both trusting what v
// trusts at that moment, and returns the node name each side proved.
func handshake(t *testing.T, v *NodeVerifier, server, client *NodeCert) (serverSaw, clientSaw string) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", v.PeerTLS(server))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			seen <- ""
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if c.(*tls.Conn).Handshake() != nil {
			seen <- ""
			return
		}
		name, _ := v.ConnNodeName(c)
		seen <- name
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), v.ClientTLS(client))
	if err == nil {
		clientSaw, _ = v.ConnNodeName(conn)
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Read(make([]byte, 1))
		conn.Close()
	}
	return <-seen, clientSaw
}

// TestNodeTLSFollowsRotation: the trusted node CAs and a node's own
// certificate change live, for the handshakes that follow: a certificate of
// a new node CA is refused before it is trusted, accepted while both are,
// and the old one refused once only the new one is.
func TestNodeTLSFollowsRotation(t *testing.T) {
	oldCA, err := LoadOrCreateNodeCA(filepath.Join(t.TempDir(), "old"))
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := LoadOrCreateNodeCA(filepath.Join(t.TempDir(), "new"))
	if err != nil {
		t.Fatal(err)
	}
	pair := func(ca *CA, name string) tls.Certificate {
		certPEM, keyPEM, err := ca.Issue(NodeRequest(name))
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	v := NewNodeVerifier(oldCA)
	n1, n2 := NewNodeCert(pair(oldCA, "n1")), NewNodeCert(pair(oldCA, "n2"))
	steps := []struct {
		name     string
		do       func()
		srv, cli string
	}{
		{"both under the old CA", func() {}, "n2", "n1"},
		{"n2 under a CA not trusted yet", func() { n2.Set(pair(newCA, "n2")) }, "", ""},
		{"both CAs trusted", func() { v.SetRoots([]*x509.Certificate{newCA.Cert, oldCA.Cert}) }, "n2", "n1"},
		{"n1 under the new CA too", func() { n1.Set(pair(newCA, "n1")) }, "n2", "n1"},
		{"only the new CA", func() { v.SetRoots([]*x509.Certificate{newCA.Cert}) }, "n2", "n1"},
		{"an old-CA certificate after the rotation", func() { n2.Set(pair(oldCA, "n2")) }, "", ""},
		{"no roots leaves the trust as it was", func() { v.SetRoots(nil); n2.Set(pair(newCA, "n2")) }, "n2", "n1"},
	}
	for _, st := range steps {
		st.do()
		srv, cli := handshake(t, v, n1, n2)
		if srv != st.srv || (st.cli != "" && cli != st.cli) {
			t.Fatalf("%s: the server saw %q, the client %q; want %q and %q", st.name, srv, cli, st.srv, st.cli)
		}
	}
}

func TestIsNodeSubject(t *testing.T) {
	tests := []struct {
		name string
		cn   string
		orgs []string
		want bool
	}{
		{"node organisation", "alice", []string{"dev", NodeOrganization}, true},
		{"node common name", NodeUserPrefix + "n1", nil, true},
		{"ordinary user", "alice", []string{"dev"}, false},
		{"a look-alike name is not the prefix", "system:trustplane-nodex", []string{"system:trustplane-node"}, false},
	}
	for _, tt := range tests {
		if got := IsNodeSubject(tt.cn, tt.orgs); got != tt.want {
			t.Errorf("%s: IsNodeSubject(%q, %v) = %v, want %v", tt.name, tt.cn, tt.orgs, got, tt.want)
		}
	}
}

func TestHoldsCert(t *testing.T) {
	a, b := mustCA(t), mustCA(t)
	bundle := append(append([]byte("junk\n"), a.CertPEM...), b.CertPEM...)
	if !HoldsCert(bundle, b.Cert) || !HoldsCert(a.CertPEM, a.Cert) {
		t.Fatal("HoldsCert missed a certificate in the bundle")
	}
	if HoldsCert(a.CertPEM, b.Cert) {
		t.Fatal("HoldsCert found a certificate that is not there")
	}
}
