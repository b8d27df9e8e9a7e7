package faultproxy

import (
	"errors"
	"net"
	"testing"
)

// TestListenNode: the gossip TCP proxy and UDP relay share one port, and a
// rule set on the node reaches every one of its proxies.
func TestListenNode(t *testing.T) {
	echo, _ := tcpEcho(t)
	uecho, _ := udpEcho(t)
	_, port, _ := net.SplitHostPort(echo)
	n, err := ListenNode(NodeConfig{IP: "127.0.0.11", Raft: echo, Gossip: uecho, API: echo, APIListen: net.JoinHostPort("127.0.0.21", port)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.GossipAddr() != n.GossipUDP.Addr().String() {
		t.Fatalf("gossip TCP on %s, UDP on %s: want one address", n.GossipAddr(), n.GossipUDP.Addr())
	}
	if got := n.API.Addr().String(); got != net.JoinHostPort("127.0.0.21", port) {
		t.Fatalf("API proxy on %s", got)
	}
	a := udpFrom(t, ipA)
	if !exchange(t, a, n.GossipUDP.Addr(), "g", wait) {
		t.Fatal("no echo through the gossip relay")
	}

	n.SetRule(ipA, Rule{Drop: true})
	for _, p := range []*TCP{n.Raft, n.GossipTCP, n.API} {
		if r, _ := p.get(ipA); !r.Drop {
			t.Fatalf("the rule did not reach the proxy on %s", p.Addr())
		}
	}
	if exchange(t, a, n.GossipUDP.Addr(), "g2", silence) {
		t.Fatal("the rule did not reach the gossip relay")
	}
	n.ClearRules()
	if !roundTrip(t, dialFrom(t, ipA, n.RaftAddr()), "r", wait) {
		t.Fatal("no echo through the raft proxy after ClearRules")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
}

func TestListenNodeRefusesHalfAnAPI(t *testing.T) {
	if _, err := ListenNode(NodeConfig{IP: "127.0.0.11", Raft: "127.0.0.1:1", Gossip: "127.0.0.1:1", API: "127.0.0.1:1"}); err == nil {
		t.Fatal("an API target without a listen address was accepted")
	}
	if _, err := ListenNode(NodeConfig{IP: "node-1", Raft: "127.0.0.1:1", Gossip: "127.0.0.1:1"}); err == nil {
		t.Fatal("a host name for IP was accepted")
	}
}
