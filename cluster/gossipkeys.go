package cluster

import (
	"bytes"
	"fmt"
)

// SetGossipKeys makes primary the key this node's gossip encrypts with and
// trusted (primary included, or added) the keys it decrypts with, live:
// memberlist's keyring is changed in place, so membership does not flap.
// A key leaves only after it stopped being primary (memberlist refuses to
// drop its primary), so callers bring the new key in everywhere before any
// node uses it (a rotation's start, then promote) and stop trusting the
// old one only once no node uses it (finish). It does nothing on a node
// without gossip (a one-node cluster).
func (n *Node) SetGossipKeys(primary []byte, trusted [][]byte) error {
	if n.gossip == nil || n.gossip.keyring == nil {
		return nil
	}
	kr := n.gossip.keyring
	want := append([][]byte{primary}, trusted...)
	for _, k := range want {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("cluster: gossip key: %w", err)
		}
	}
	if err := kr.UseKey(primary); err != nil {
		return fmt.Errorf("cluster: gossip key: %w", err)
	}
	for _, k := range kr.GetKeys() {
		keep := false
		for _, w := range want {
			keep = keep || bytes.Equal(k, w)
		}
		if !keep {
			if err := kr.RemoveKey(k); err != nil {
				return fmt.Errorf("cluster: gossip key: %w", err)
			}
		}
	}
	return nil
}
