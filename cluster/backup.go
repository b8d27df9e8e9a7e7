package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// Backup and restore (trustplane snapshot save / restore).
//
// Save: Export serves a point-in-time copy of the state on any node, after
// a read index confirmed by the leader, so the copy holds every write
// acknowledged before the call, on a follower as on the leader. It is the
// fsm's O(1) copy-on-write clone: no raft snapshot is forced, no log is
// truncated, and no large body goes through the leader.
//
// Restore: SeedDataDir writes a copy into an empty data directory as the
// raft state of a new one-voter cluster, the state a node has after it
// installed a snapshot and truncated its log: a FileSnapshotStore entry at
// the copy's index and term whose configuration holds only the new node,
// an empty log, and CurrentTerm set to the term. The node then starts as
// usual (New): raft restores the snapshot into the fsm, elects the one
// voter in a term above the copy's, and appends after its index, so every
// object keeps its resourceVersion and every new write gets a larger one.
// Nodes started empty with --join are added by the leader and receive the
// snapshot through InstallSnapshot.

// ErrExistingState: SeedDataDir found raft state (or anything else) in the
// data directory's raft folder, and never overwrites it.
var ErrExistingState = errors.New("cluster: the data directory already holds raft state")

// keyCurrentTerm is the stable-store key under which hashicorp/raft keeps
// its current term (raft.go, unexported there; TestSeedDataDir fails if it
// ever changes, because the restored node's first term would then not be
// above the snapshot's).
var keyCurrentTerm = []byte("CurrentTerm")

// Export returns a copy of the replicated state that holds every write
// acknowledged before the call (it waits for a read index confirmed by the
// leader and for this node to apply it), and the raft term, which is at
// least the term of the copy's last entry. It fails like ReadIndex:
// ErrNoLeader or ErrTimeout without a leader, never with a copy it could
// not confirm.
func (n *Node) Export(ctx context.Context) (*fsm.Export, uint64, error) {
	idx, err := n.ReadIndex(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := n.WaitApplied(ctx, idx); err != nil {
		return nil, 0, err
	}
	exp := n.fsm.Export()
	// Read after the copy: every entry in it was appended in this term or
	// an earlier one.
	return exp, n.raft.CurrentTerm(), nil
}

// SeedConfig says which node a seeded data directory belongs to.
type SeedConfig struct {
	// DataDir is the new node's data directory; its raft folder must not
	// exist or be empty.
	DataDir string
	// NodeName and RaftAddr are the new node's raft ServerID and the raft
	// address peers dial (Config.NodeName, and Config.RaftAdvertise or
	// else RaftAddr): the only voter of the seeded configuration. The node
	// must be started with the same ones.
	NodeName string
	RaftAddr string
	// Term is the raft term the copy was taken in (its header's Term).
	Term uint64
}

// SeedDataDir writes exp as the raft state of a new one-voter cluster into
// cfg.DataDir (see the comment at the top of this file). It refuses with
// ErrExistingState a data directory whose raft folder holds anything, and
// builds the state in a temporary folder that it renames into place only
// when complete, so a failure leaves the data directory as it found it.
//
// What is cluster-specific is not carried: the removal markers of
// `trustplane members remove` (removed.go) and the data-directory records
// (datadir.go) name members of the source cluster's configuration, which
// the new configuration replaces, so they are dropped. Everything else (every object with its history, the token
// signing keys) is carried byte for byte, encrypted at rest as it was.
func SeedDataDir(cfg SeedConfig, exp *fsm.Export) error {
	if cfg.NodeName == "" || cfg.RaftAddr == "" || cfg.DataDir == "" {
		return fmt.Errorf("%w: seeding needs a data directory, a node name and a raft address", ErrInvalidConfig)
	}
	if exp.Index() == 0 {
		return fmt.Errorf("%w: the snapshot is at index 0", ErrInvalidConfig)
	}
	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := refuseExisting(raftDir); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("cluster: create %s: %w", cfg.DataDir, err)
	}
	tmp, err := os.MkdirTemp(cfg.DataDir, ".raft-seed-")
	if err != nil {
		return fmt.Errorf("cluster: create a temporary folder in %s: %w", cfg.DataDir, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := seed(tmp, cfg, exp); err != nil {
		return err
	}
	if err := privatise(tmp); err != nil {
		return err
	}
	// A node or another restore may have created it meanwhile. An empty
	// folder is removed first: not every filesystem renames over one.
	if err := refuseExisting(raftDir); err != nil {
		return err
	}
	if err := os.Remove(raftDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s: %v", ErrExistingState, raftDir, err)
	}
	if err := os.Rename(tmp, raftDir); err != nil {
		return fmt.Errorf("cluster: move the seeded raft state into %s: %w", raftDir, err)
	}
	done = true
	return syncDir(cfg.DataDir)
}

// refuseExisting fails unless dir is absent or an empty directory.
func refuseExisting(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: %s: %v", ErrExistingState, dir, err)
	case len(entries) > 0:
		return fmt.Errorf("%w: %s is not empty (restore seeds a new node's empty data directory and never overwrites one)", ErrExistingState, dir)
	}
	return nil
}

func seed(dir string, cfg SeedConfig, exp *fsm.Export) error {
	store, err := openLogStore(dir, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("cluster: create raft log: %w", err)
	}
	// The term a restored node votes in must be above the snapshot's:
	// raft's log terms never decrease.
	err = store.SetUint64(keyCurrentTerm, cfg.Term)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: write the current term: %w", err)
	}

	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetained, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("cluster: create snapshot store: %w", err)
	}
	addr := raft.ServerAddress(cfg.RaftAddr)
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeName), Address: addr}}}
	// The transport only encodes the legacy peer list of the snapshot's
	// metadata; nothing is sent.
	_, trans := raft.NewInmemTransport(addr)
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, exp.Index(), cfg.Term, conf, exp.Index(), trans)
	if err != nil {
		return fmt.Errorf("cluster: create snapshot: %w", err)
	}
	if err := exp.WriteTo(sink, isMembershipRecord); err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("cluster: write snapshot: %w", err)
	}
	return nil
}

// isMembershipRecord says whether k is a removal marker (removed.go), a
// data-directory record (datadir.go), the gossip keyring (api/gossipkeys'
// record, GossipKeysResource) or the node, cluster and signer CAs
// (api/caroots' records, NodeCAsResource, ClusterCAsResource,
// SignerCAsResourcePrefix): all describe the source cluster's members, and
// a cluster seeded from the backup has its own (its nodes' CA directory
// and signing files seed its keyring and its CAs).
func isMembershipRecord(k fsm.Key) bool {
	return k.Space == fsm.SpaceInternal &&
		(k.Resource == removedPrefix.Resource || k.Resource == dataDirPrefix.Resource || k.Resource == GossipKeysResource || k.Resource == NodeCAsResource || k.Resource == ClusterCAsResource || strings.HasPrefix(k.Resource, SignerCAsResourcePrefix))
}

// GossipKeysResource is the internal resource api/gossipkeys keeps the
// gossip keyring under; a restore leaves it out (isMembershipRecord).
const GossipKeysResource = "gossipkeys"

// NodeCAsResource and ClusterCAsResource are the internal resources
// api/caroots keeps the node CAs and the cluster CAs under; a restore
// leaves them out (isMembershipRecord).
const (
	NodeCAsResource    = "nodecas"
	ClusterCAsResource = "clustercas"
	// SignerCAsResourcePrefix starts the resource of each built-in CSR
	// signer's CAs (api/caroots SignerKind).
	SignerCAsResourcePrefix = "signercas-"
)

// privatise makes dir's tree 0700/0600: raft's snapshot store asks for
// 0755 and 0644, and a snapshot holds every Secret.
func privatise(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		return os.Chmod(p, mode)
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cluster: sync %s: %w", dir, err)
	}
	return nil
}
