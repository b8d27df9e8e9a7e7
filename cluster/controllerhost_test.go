package cluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// TestStandsForControllers: a single voter stands for the controllers'
// lease as the leader; of three voters the followers stand and the leader
// does not; a follower cut off from the log stops standing, and stands
// again once the log reaches it. (A replica never stands:
// TestReplicaJoinsAsNonvoter.)
func TestStandsForControllers(t *testing.T) {
	t.Run("a single voter", func(t *testing.T) {
		c := newHACluster(t)
		conf := []raft.Server{{Suffrage: raft.Voter, ID: "solo", Address: "inmem-solo"}}
		c.add("solo", haOpts{bootstrap: conf})
		l := c.leader()
		waitFor(t, "the only voter to stand", l.node.StandsForControllers)
	})

	t.Run("three voters", func(t *testing.T) {
		c := newHACluster(t)
		var conf []raft.Server
		for i := range 3 {
			name := fmt.Sprintf("node-%d", i)
			conf = append(conf, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(name), Address: raft.ServerAddress("inmem-" + name)})
		}
		for _, s := range conf {
			c.add(string(s.ID), haOpts{bootstrap: conf})
		}
		l, f := c.leaderAndFollower()
		waitFor(t, "the followers to stand", func() bool {
			for _, n := range c.running() {
				if n != l && !n.node.StandsForControllers() {
					return false
				}
			}
			return true
		})
		if l.node.StandsForControllers() {
			t.Fatal("the leader stands beside followers that do")
		}
		c.disconnectRaft(f)
		waitFor(t, "a follower cut off from the log to stop standing", func() bool { return !f.node.StandsForControllers() })
		if l.node.StandsForControllers() {
			t.Fatal("the leader stands while another follower does")
		}
		c.reconnectRaft(f)
		waitFor(t, "every follower to stand again", func() bool {
			l := c.leader()
			for _, n := range c.running() {
				if n.node.StandsForControllers() != (n != l) {
					return false
				}
			}
			return true
		})
	})
}
