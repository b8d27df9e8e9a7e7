package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// Data-directory identity. A voter whose data directory is lost (a lost
// PVC, a wiped disk) and that comes back under the same name and raft
// address is, to raft, the voter it was: it counts toward every quorum
// and votes, while holding none of the log it acknowledged. Worse, with
// no configuration, hashicorp/raft grants its vote to any candidate whose
// log is at least as long as its own (empty) one, and it has forgotten
// the vote it cast in the current term. If another node then fails, a
// candidate lacking acknowledged writes can win with its vote, and those
// writes are lost.
//
// So every data directory gets a random identity when a node first opens
// it (dataDirKey in raft's stable store, next to CurrentTerm), which it
// answers over HasState. Each reconcile, the leader asks every server it
// can reach, at its configured raft address, and records each voter's
// identity through the log (dataDirPrefix, like the removal markers).
// When a voter answers with another one, the leader demotes it to a
// non-voter, under the quorum rule of every removal, until it has applied
// everything the leader had logged when it noticed (the most the old
// directory can have acknowledged); then it records the new identity and
// makes it a voter again. Non-voters are made voters by the same rule
// whatever made them non-voters.
//
// "No raft state" alone is no sign of a lost directory: an initial voter of
// bootstrap-expect has none until the leader's first replication reaches
// it, and it has acknowledged nothing. So the leader records a voter's
// identity the first time it sees it with state, and only a different
// identity later is a lost directory.
//
// What stays open: a voter emptied before any leader recorded its
// identity (within seconds of the cluster forming, or of the first leader
// running this rule) is not recognised. The leader notices within a
// reconcile interval (reconcileInterval), and until the demotion commits
// the emptied node is still a voter. It does not start elections itself
// (raft campaigns only with a configuration), so the hazard in that window
// is its vote in an election that happens to run then.

// dataDirKey is the stable-store key of the data directory's identity.
var dataDirKey = []byte("TrustplaneDataDirID")

// dataDirIDLen is the length of an identity (hex of 16 random bytes).
const dataDirIDLen = 32

// dataDirPrefix is where the leader records each voter's data-directory
// identity: one key per node name, under the internal group no API
// request can reach (removed.go).
var dataDirPrefix = fsm.Prefix{Space: fsm.SpaceInternal, Resource: "datadirs"}

func dataDirRecordKey(name string) fsm.Key {
	return fsm.Key{Space: dataDirPrefix.Space, Resource: dataDirPrefix.Resource, Name: name}
}

// loadDataDirID returns the data directory's identity from the stable
// store, creating one when there is none (a new, emptied or older data
// directory).
func loadDataDirID(st raft.StableStore) (string, error) {
	b, err := st.Get(dataDirKey)
	switch {
	case err == nil && len(b) > 0:
		return string(b), nil
	case err != nil && err.Error() != "not found":
		// raft's stores (bolt, in-memory) say "not found" for a missing
		// key, as raft itself relies on. Anything else must not mint a
		// new identity, which would make a restart look like a lost
		// data directory.
		return "", fmt.Errorf("cluster: read the data directory identity: %w", err)
	}
	var r [dataDirIDLen / 2]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("cluster: data directory identity: %w", err)
	}
	id := hex.EncodeToString(r[:])
	if err := st.Set(dataDirKey, []byte(id)); err != nil {
		return "", fmt.Errorf("cluster: store the data directory identity: %w", err)
	}
	return id, nil
}

// recordedDataDir is the identity the leader recorded for name ("" if
// none). Only meaningful on a read-ready leader.
func (n *Node) recordedDataDir(name string) string {
	kv, _, err := n.fsm.Get(dataDirRecordKey(name), 0)
	if err != nil || kv == nil {
		return ""
	}
	return string(kv.Value)
}

// recordDataDir records id as name's data-directory identity (leader only).
func (n *Node) recordDataDir(name, id string) error {
	if id == "" || n.recordedDataDir(name) == id {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	res, err := n.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: dataDirRecordKey(name), Value: []byte(id), UID: "data-dir/" + name})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("record the data directory of %q: %w", name, err)
	}
	return nil
}

// reconcileDataDirs is reconcile's data-directory rule (see above). It
// asks every server in conf that raft reaches or gossip shows alive for
// its name, data directory and applied index over the internal RPC (at
// its configured raft address, so gossip's word is not needed: a pod with
// a new IP is checked before gossip takes it back). catchup holds, per
// demoted server, the index it must apply before it votes again; it lives
// as long as this node leads. conf is updated with the changes made.
func (n *Node) reconcileDataDirs(conf map[raft.ServerID]raft.Server, members map[string]member, catchup map[raft.ServerID]uint64) {
	if n.dialRPC == nil {
		return
	}
	for id := range catchup {
		if s, ok := conf[id]; !ok || s.Suffrage == raft.Voter {
			delete(catchup, id)
		}
	}
	ids := make([]string, 0, len(conf))
	for id := range conf {
		ids = append(ids, string(id))
	}
	sort.Strings(ids)
	for _, name := range ids {
		id := raft.ServerID(name)
		s := conf[id]
		if name == n.cfg.NodeName || s.Suffrage == raft.Staging {
			continue
		}
		if m, ok := members[name]; !n.raftReaches(id) && (!ok || m.status != StatusAlive) {
			continue // down: nothing to ask
		}
		st, err := n.peerState(s.Address, name)
		if err != nil {
			n.logOnce(slog.LevelDebug, "membership: cannot check a server's data directory", name, "", err)
			continue
		}
		recorded := n.recordedDataDir(name)
		switch s.Suffrage {
		case raft.Voter:
			if st.Dir == "" || st.Dir == recorded {
				continue // an older node that reports none, or the same directory
			}
			if recorded == "" {
				// First sight of this voter (a new cluster, or one
				// upgraded from before this rule): record its
				// directory once it has state. An initial voter that
				// has not received any log yet acknowledged nothing.
				if st.HasState {
					if err := n.recordDataDir(name, st.Dir); err != nil {
						n.logger.Warn("membership: recording a voter's data directory failed; will retry", "member", name, "error", err)
						return
					}
				}
				continue
			}
			if err := n.removalKeepsQuorum(conf, members, id); err != nil {
				n.logOnce(slog.LevelError, "membership: not demoting a voter that lost its data directory", name, "", fmt.Errorf("voter %q came back with another data directory than the one recorded for it and must not vote until it has caught up, but making it a non-voter now would leave no quorum (%w); acknowledged writes are at risk if another voter fails before it catches up", name, err))
				continue
			}
			target := n.raft.LastIndex()
			if err := n.awaitChange(n.raft.DemoteVoter(id, 0, n.cfg.ApplyTimeout)); err != nil {
				n.logger.Warn("membership: demoting a voter that lost its data directory failed; will retry", "member", name, "error", err)
				return
			}
			catchup[id] = target
			s.Suffrage = raft.Nonvoter
			conf[id] = s
			n.logger.Warn("membership: a voter came back with another data directory than the one recorded for it; it is a non-voter until it has caught up", "member", name, "catch_up_to", target, "applied", st.Applied)
		case raft.Nonvoter:
			if st.Replica {
				continue // a read replica never votes, however caught up
			}
			target, ok := catchup[id]
			if !ok {
				target = n.raft.LastIndex()
				catchup[id] = target
			}
			if st.Applied < target {
				n.logOnce(slog.LevelInfo, "membership: non-voter catching up", name, "", fmt.Errorf("non-voter %q becomes a voter once it has applied index %d", name, target))
				continue
			}
			if err := n.recordDataDir(name, st.Dir); err != nil {
				n.logger.Warn("membership: recording a non-voter's data directory failed; will retry", "member", name, "error", err)
				return
			}
			if err := n.awaitChange(n.raft.AddVoter(id, s.Address, 0, n.cfg.ApplyTimeout)); err != nil {
				n.logger.Warn("membership: promoting a caught-up non-voter failed; will retry", "member", name, "error", err)
				return
			}
			delete(catchup, id)
			s.Suffrage = raft.Voter
			conf[id] = s
			n.logger.Info("membership: a non-voter has caught up and is a voter again", "member", name, "applied", st.Applied)
		}
	}
}

// peerState asks the server name at addr (its raft address, over the
// internal RPC's mutual TLS) for its HasState answer: raft state, data
// directory, applied index. An answer under another name is an error.
func (n *Node) peerState(addr raft.ServerAddress, name string) (*rpcResponse, error) {
	ctx, cancel := context.WithTimeout(n.ctx, statsTimeout)
	defer cancel()
	resp, err := n.call(ctx, addr, rpcRequest{Op: opHasState})
	if err != nil {
		return nil, err
	}
	if resp.Name != name {
		return nil, fmt.Errorf("the node at %s answers as %q, not %q", addr, resp.Name, name)
	}
	return resp, nil
}
