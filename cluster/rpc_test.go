package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"net"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/testlog"
)

func frame(payload string) []byte {
	b := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	copy(b[4:], payload)
	return b
}

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

// The internal RPC survives malformed input: every bad frame closes the
// connection or gets an error response, and the node keeps working.
func TestRPCBadFrames(t *testing.T) {
	ctx := testCtx(t)
	ca := newTestCA(t, "cluster-ca")
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.TLS = tlsConfig(ca.nodeCert(t, "node-a"), ca)
		c.PeerName = certPeerName
	})
	if _, err := n.ReadIndex(ctx); err != nil {
		t.Fatal(err)
	}
	addr := n.trans.LocalAddr()
	client := clientTLS(tlsConfig(ca.nodeCert(t, "client"), ca))

	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, 0xFFFFFFFF)
	tests := []struct {
		name string
		send []byte
		// wantCode, if set, is the error code the response must carry; ""
		// means the server may just close the connection.
		wantCode string
	}{
		{"marker only", []byte{rpcMarker}, ""},
		{"zero-length frame", cat([]byte{rpcMarker}, []byte{0, 0, 0, 0}), "bad_request"},
		{"oversized frame length", cat([]byte{rpcMarker}, huge), "bad_request"},
		{"truncated length", []byte{rpcMarker, 0, 0}, ""},
		{"truncated body", cat([]byte{rpcMarker}, frame(`{"op":"stats"}`)[:8]), ""},
		{"body is not JSON", cat([]byte{rpcMarker}, frame("hello")), "bad_request"},
		{"wrong field types", cat([]byte{rpcMarker}, frame(`{"op":5,"name":[1,2]}`)), "bad_request"},
		{"unknown operation", cat([]byte{rpcMarker}, frame(`{"op":"explode"}`)), "bad_request"},
		{"a newer request version", cat([]byte{rpcMarker}, frame(`{"v":3,"op":"stats"}`)), "unsupported_version"},
		{"a binary frame cut short", cat([]byte{rpcMarker}, frame(string(appendProposeRequest(nil, 10, [][]byte{putCmd("cut", "v").Encode()})[:9]))), "bad_request"},
		{"a binary frame counting more commands than bytes", cat([]byte{rpcMarker}, frame("\x02\x0a\xff\xff\xff\x0f\x01")), "bad_request"},
		{"a binary frame with trailing bytes", cat([]byte{rpcMarker}, frame(string(append(appendProposeRequest(nil, 10, nil), 0)))), "bad_request"},
		{"a binary frame of no commands", cat([]byte{rpcMarker}, frame(string(appendProposeRequest(nil, 10, nil)))), "bad_request"},
		{"remove_server of another node", cat([]byte{rpcMarker}, frame(`{"op":"remove_server","name":"node-a","force":true}`)), "not_permitted"},
		{"remove_server of an unknown other name", cat([]byte{rpcMarker}, frame(`{"op":"remove_server","name":"ghost"}`)), "not_permitted"},
		{"remove_server of the caller, not a member", cat([]byte{rpcMarker}, frame(`{"op":"remove_server","name":"client"}`)), "unknown_member"},
		{"binary noise after the marker", cat([]byte{rpcMarker}, []byte{0, 0, 0, 3, 0xff, 0xfe, 0x00}), "bad_request"},
		{"noise without the marker goes to raft", []byte{0x55, 0x01, 0x02, 0x03}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", string(addr), client)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := conn.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			_ = conn.CloseWrite()
			var resp rpcResponse
			err = readFrame(conn, &resp, rpcMaxFrame)
			if tc.wantCode != "" {
				if err != nil {
					t.Fatalf("no response: %v", err)
				}
				if resp.Code != tc.wantCode {
					t.Fatalf("response %+v, want code %q", resp, tc.wantCode)
				}
			} else if err == nil && resp.Code == "" {
				t.Fatalf("malformed request got a success response %+v", resp)
			}
		})
	}

	// The node is unharmed and still answers well-formed calls.
	res, err := n.Propose(ctx, putCmd("after-noise", "v"))
	if err != nil || res.Err != nil {
		t.Fatalf("Propose after bad frames: %v %v", err, res)
	}
	if idx, err := n.ReadIndex(ctx); err != nil || idx < res.Revision {
		t.Fatalf("ReadIndex after bad frames = %d, %v", idx, err)
	}
	resp, err := n.call(ctx, addr, rpcRequest{Op: opStats})
	if err != nil || resp.Stats == nil || resp.Stats.State != "Leader" || resp.Stats.Applied < res.Revision {
		t.Fatalf("stats over RPC = %+v, %v", resp, err)
	}
	if resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState}); err != nil || !resp.HasState {
		t.Fatalf("has_state over RPC = %+v, %v", resp, err)
	}
	// A request without a version, as builds before the field send it, is
	// version 1 and answered.
	conn, err := tls.Dial("tcp", string(addr), client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write(cat([]byte{rpcMarker}, frame(`{"op":"stats"}`))); err != nil {
		t.Fatal(err)
	}
	var old rpcResponse
	if err := readFrame(conn, &old, rpcMaxFrame); err != nil || old.Code != "" || old.Stats == nil {
		t.Fatalf("a request without a version: %+v, %v", old, err)
	}
}

// A connection whose certificate is not from the cluster CA never reaches
// the RPC handler.
func TestRPCRejectsForeignCertificate(t *testing.T) {
	ctx := testCtx(t)
	ours := newTestCA(t, "cluster-ca")
	foreign := newTestCA(t, "foreign-ca")
	logs := &testlog.Buffer{}
	n := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.TLS = tlsConfig(ours.nodeCert(t, "node-a"), ours)
		c.Logger = logs.Logger()
	})

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"client certificate from another CA", &tls.Config{Certificates: []tls.Certificate{foreign.nodeCert(t, "intruder")}, RootCAs: ours.pool}},
		{"no client certificate", &tls.Config{RootCAs: ours.pool}},
		{"node of another cluster", tlsConfig(foreign.nodeCert(t, "other"), foreign)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, err := newTLSStreamLayer("127.0.0.1:0", "", tc.cfg, testLogger(), handshakeLimits{})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			conn, err := cli.dialRPC(cctx, n.trans.LocalAddr())
			if err != nil {
				return // refused at the handshake
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			werr := writeFrame(conn, rpcRequest{Op: opStats}, rpcMaxRequestFrame)
			var resp rpcResponse
			rerr := readFrame(conn, &resp, rpcMaxFrame)
			if werr == nil && rerr == nil {
				t.Fatalf("foreign peer got an RPC answer: %+v", resp)
			}
		})
	}
	waitFor(t, "the refusal log line", func() bool { return logs.Contains("TLS handshake failed") })
}

// Three nodes on the real TLS transport with gossip form one cluster, and
// a follower serves a linearizable read index over the TLS internal RPC.
func TestTLSClusterWithGossip(t *testing.T) {
	ctx := testCtx(t)
	ca := newTestCA(t, "cluster-ca")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	const size = 3
	var gossipAddrs, raftAddrs []string
	for range size {
		gossipAddrs = append(gossipAddrs, freeAddr(t))
		raftAddrs = append(raftAddrs, freeAddr(t))
	}
	nodes := make([]*Node, size)
	fsms := make([]*fsm.FSM, size)
	var wg sync.WaitGroup
	errs := make(chan error, size)
	for i := range size {
		name := fmt.Sprintf("tls-%d", i)
		cfg := DefaultConfig()
		cfg.NodeName = name
		cfg.DataDir = t.TempDir()
		cfg.RaftAddr = raftAddrs[i]
		cfg.TLS = tlsConfig(ca.nodeCert(t, name), ca)
		cfg.PeerName = certPeerName
		cfg.Logger = testLogger()
		cfg.BootstrapExpect = size
		cfg.GossipAddr = gossipAddrs[i]
		cfg.GossipKey = key
		cfg.Join = gossipAddrs
		cfg.ClusterID = "tls-cluster"
		cfg.APIAddr = "127.0.0.1:1644" + fmt.Sprint(i)
		if i > 0 { // node 0 is an older build that reports no features, facts or version
			cfg.Features = []string{"f1"}
			cfg.Facts = func() map[string]string { return map[string]string{"name": name} }
			cfg.Version = "v9.9.9-" + name
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := fsm.New()
			n, err := New(cfg, f)
			if err != nil {
				errs <- err
				return
			}
			nodes[i], fsms[i] = n, f
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, n := range nodes {
		t.Cleanup(func() { _ = n.Shutdown() })
	}

	var leader, follower *Node
	waitFor(t, "one leader with three voters everywhere", func() bool {
		leader, follower = nil, nil
		for _, n := range nodes {
			if len(voters(n)) != size {
				return false
			}
			if n.readReady() {
				leader = n
			} else if follower == nil {
				follower = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if id, _ := n.Leader(); id != leader.cfg.NodeName {
				return false
			}
		}
		return true
	})
	res, err := leader.Propose(ctx, putCmd("tls", "v"))
	if err != nil || res.Err != nil {
		t.Fatalf("Propose: %v %v", err, res)
	}
	idx, err := follower.ReadIndex(ctx)
	if err != nil || idx < res.Revision {
		t.Fatalf("follower ReadIndex over TLS = %d, %v; want >= %d", idx, err, res.Revision)
	}
	ms, err := follower.Members(ctx)
	if err != nil || len(ms) != size {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
	for _, m := range ms {
		if m.RaftState == "unknown" || m.AppliedIndex == 0 {
			t.Errorf("member without stats over TLS: %+v", m)
		}
		if want := m.Name != nodes[0].cfg.NodeName; slices.Contains(m.Features, "f1") != want || (m.Facts["name"] == m.Name) != want || (m.Version == "v9.9.9-"+m.Name) != want {
			t.Errorf("member %s reports features %v, facts %v, version %q", m.Name, m.Features, m.Facts, m.Version)
		}
	}
	if addr, err := follower.LeaderAPIAddr(); err != nil || addr != leader.cfg.APIAddr {
		t.Errorf("LeaderAPIAddr = %q, %v; want %q", addr, err, leader.cfg.APIAddr)
	}
	// Over the RPC a node may remove only itself, as its certificate names
	// it: asking the leader to remove another node, durably or not, is
	// refused and changes nothing.
	leaderAddr, _ := follower.raft.LeaderWithID()
	for _, target := range []string{leader.cfg.NodeName, "ghost", otherFollower(nodes, leader, follower).cfg.NodeName} {
		for _, durable := range []bool{false, true} {
			_, err := follower.call(ctx, leaderAddr, rpcRequest{Op: opRemoveServer, Name: target, Durable: durable})
			if !errors.Is(err, ErrNotPermitted) {
				t.Errorf("RPC remove %q (durable=%v) from %s = %v, want ErrNotPermitted", target, durable, follower.cfg.NodeName, err)
			}
		}
	}
	if got := len(voters(leader)); got != size {
		t.Fatalf("voters after refused removals: %d, want %d", got, size)
	}
	// RemoveMember of another node is the leader's alone.
	if err := follower.RemoveMember(ctx, "ghost"); !errors.Is(err, ErrNotLeader) {
		t.Errorf("follower RemoveMember(ghost) = %v, want ErrNotLeader", err)
	}
	if err := leader.RemoveMember(ctx, "ghost"); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("leader RemoveMember(ghost) = %v, want ErrUnknownMember", err)
	}
	// Removing itself (what Leave asks) over the RPC is honoured.
	if _, err := follower.call(ctx, leaderAddr, rpcRequest{Op: opRemoveServer, Name: follower.cfg.NodeName}); err != nil {
		t.Fatalf("RPC remove of the caller itself: %v", err)
	}
	waitFor(t, "the follower to leave the configuration", func() bool { return len(voters(leader)) == size-1 })
}

// otherFollower is the node of nodes that is neither leader nor follower.
func otherFollower(nodes []*Node, leader, follower *Node) *Node {
	for _, n := range nodes {
		if n != leader && n != follower {
			return n
		}
	}
	return nil
}

// TestRPCReusesConnections: sequential calls to one peer share a pooled
// connection, and a pooled connection the peer closed is replaced
// transparently for idempotent calls.
func TestRPCReusesConnections(t *testing.T) {
	ctx := testCtx(t)
	ca := newTestCA(t, "cluster-ca")
	server := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.TLS = tlsConfig(ca.nodeCert(t, "node-a"), ca)
	})
	if _, err := server.ReadIndex(ctx); err != nil {
		t.Fatal(err)
	}
	client := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New(), func(c *Config) {
		c.TLS = tlsConfig(ca.nodeCert(t, "node-b"), ca)
	})
	var dials atomic.Int32
	dial := client.dialRPC
	client.dialRPC = func(ctx context.Context, a raft.ServerAddress) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, a)
	}
	addr := server.trans.LocalAddr()
	for i := 0; i < 5; i++ {
		if _, err := client.call(ctx, addr, rpcRequest{Op: opStats}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := dials.Load(); got != 1 {
		t.Fatalf("5 sequential calls dialled %d times, want 1", got)
	}
	// Break the pooled connection behind the pool's back: the next call
	// must notice and redial once.
	if c := client.rpcPool.get(addr); c != nil {
		c.Close()
		client.rpcPool.put(addr, c)
	}
	if _, err := client.call(ctx, addr, rpcRequest{Op: opStats}); err != nil {
		t.Fatalf("call on a stale pooled connection: %v", err)
	}
	if got := dials.Load(); got != 2 {
		t.Fatalf("dials after a stale connection = %d, want 2", got)
	}
}
