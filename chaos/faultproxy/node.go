package faultproxy

import (
	"errors"
	"fmt"
	"net"
)

// NodeConfig places the proxies in front of one trustplane node.
type NodeConfig struct {
	// IP is the node's own IP (its bind IP, the source of everything it
	// sends). The raft and gossip proxies listen on it, on ports the
	// kernel chooses: the node advertises them (--raft-advertise-addr,
	// --gossip-advertise-addr), so it must be started after ListenNode.
	IP string
	// Raft and Gossip are the node's real addresses (--raft-addr,
	// --gossip-addr): the proxies' targets.
	Raft, Gossip string
	// API is the node's real API address (--listen); APIListen is where
	// its proxy listens. --advertise-address gives only a host, so the
	// proxy must keep the API's port, on another IP (the node advertises
	// that IP). Both empty: no API proxy.
	API, APIListen string
}

// Node is the set of proxies in front of one node. Rules set through it
// apply to all of them.
type Node struct {
	Raft, GossipTCP *TCP
	GossipUDP       *UDP
	API             *TCP // nil without an API proxy
}

// ListenNode starts a node's proxies. The gossip TCP proxy and UDP relay
// share one port, since memberlist advertises one address for both.
func ListenNode(c NodeConfig) (*Node, error) {
	if net.ParseIP(c.IP) == nil {
		return nil, fmt.Errorf("faultproxy: node IP %q is not an IP address", c.IP)
	}
	if (c.API == "") != (c.APIListen == "") {
		return nil, errors.New("faultproxy: set both API and APIListen, or neither")
	}
	n := &Node{}
	var err error
	if n.Raft, err = ListenTCP(net.JoinHostPort(c.IP, "0"), c.Raft); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 20; attempt++ {
		if n.GossipTCP, err = ListenTCP(net.JoinHostPort(c.IP, "0"), c.Gossip); err != nil {
			break
		}
		if n.GossipUDP, err = ListenUDP(n.GossipTCP.Addr().String(), c.Gossip); err == nil {
			break
		}
		n.GossipTCP.Close() // the port is taken for UDP: try another
		n.GossipTCP = nil
	}
	if err == nil && c.API != "" {
		n.API, err = ListenTCP(c.APIListen, c.API)
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) tcp() []*TCP {
	var out []*TCP
	for _, p := range []*TCP{n.Raft, n.GossipTCP, n.API} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// RaftAddr is what the node advertises for raft (--raft-advertise-addr).
func (n *Node) RaftAddr() string { return n.Raft.Addr().String() }

// GossipAddr is what the node advertises for gossip
// (--gossip-advertise-addr), and what the others --join.
func (n *Node) GossipAddr() string { return n.GossipTCP.Addr().String() }

// SetRule sets r for traffic from fromIP on every proxy of the node.
func (n *Node) SetRule(fromIP string, r Rule) {
	for _, p := range n.tcp() {
		p.SetRule(fromIP, r)
	}
	if n.GossipUDP != nil {
		n.GossipUDP.SetRule(fromIP, r)
	}
}

// ClearRules lifts every rule on every proxy of the node.
func (n *Node) ClearRules() {
	for _, p := range n.tcp() {
		p.ClearRules()
	}
	if n.GossipUDP != nil {
		n.GossipUDP.ClearRules()
	}
}

// Close closes every proxy of the node.
func (n *Node) Close() error {
	var errs []error
	for _, p := range n.tcp() {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.GossipUDP != nil {
		if err := n.GossipUDP.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
