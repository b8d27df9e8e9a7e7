package cluster

import (
	"net"
	"testing"
	"time"
)

// Findings from running on Kubernetes: StatefulSet pods whose raft
// addresses are stable DNS names, whose gossip address (the pod IP)
// changes on every restart, and whose gossip seeds name every replica,
// the pod itself included.

// A seed that names this node by another spelling (a pod's own DNS name;
// here localhost) makes memberlist "join" itself. That is not joining: the
// node keeps trying until a peer answers, here one that starts later and
// has no seeds of its own, so only this node's retries can bring the two
// together.
func TestJoinIgnoresItselfAmongSeeds(t *testing.T) {
	c := newHACluster(t)
	aGossip, bGossip := freeAddr(t), freeAddr(t)
	_, aPort, _ := net.SplitHostPort(aGossip)
	a := c.add("node-a", haOpts{expect: 2, gossip: true, gossipAt: aGossip, join: []string{"localhost:" + aPort, bGossip}})
	// Let node-a's first join attempts run while node-b is down: the one
	// seed that answers is node-a itself.
	waitFor(t, "node-a's first join attempt", func() bool {
		return a.logs.contains("joined gossip") || a.logs.contains("reached no other node")
	})
	time.Sleep(time.Second)
	b := c.add("node-b", haOpts{expect: 2, gossip: true, gossipAt: bGossip})
	waitFor(t, "node-a and node-b to see each other alive", func() bool {
		return memberStatus(a.node, "node-b") == StatusAlive && memberStatus(b.node, "node-a") == StatusAlive
	})
	waitVoters(t, []string{"node-a", "node-b"}, a, b)
	c.leader().propose(t, testCtx(t), "after-join")
}
