package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/fsm"
)

// TestSeedDataDir: a node started on a seeded data directory is a
// one-voter cluster holding every exported object at its original
// revision, without the source's removal markers; it elects itself in a
// term above the export's, and new writes get revisions above its index.
func TestSeedDataDir(t *testing.T) {
	ctx := testCtx(t)
	src := startTLSNode(t, t.TempDir(), "127.0.0.1:0", fsm.New())
	waitFor(t, "source leader", src.readReady)
	revs := map[string]uint64{}
	for i := range 5 {
		name := fmt.Sprintf("cm-%d", i)
		res, err := src.Propose(ctx, putCmd(name, "v"))
		if err != nil || res.Err != nil {
			t.Fatalf("Propose: %v %v", err, res)
		}
		revs[name] = res.Revision
	}
	if err := src.markRemoved(ctx, "old-peer"); err != nil {
		t.Fatal(err)
	}
	gossipKeys := fsm.Key{Space: fsm.SpaceInternal, Resource: GossipKeysResource, Name: "keyring"}
	nodeCAs := fsm.Key{Space: fsm.SpaceInternal, Resource: NodeCAsResource, Name: "set"}
	clusterCAs := fsm.Key{Space: fsm.SpaceInternal, Resource: ClusterCAsResource, Name: "set"}
	signerCAs := fsm.Key{Space: fsm.SpaceInternal, Resource: SignerCAsResourcePrefix + "kubelet-serving", Name: "set"}
	for _, k := range []fsm.Key{gossipKeys, nodeCAs, clusterCAs, signerCAs} {
		if res, err := src.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: k, Value: []byte("sealed")}); err != nil || res.Err != nil {
			t.Fatalf("Propose: %v %v", err, res)
		}
	}
	exp, term, err := src.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exp.Index() < revs["cm-4"] {
		t.Fatalf("export at %d misses the write at %d acknowledged before it", exp.Index(), revs["cm-4"])
	}
	// A write after the export is not in it.
	if res, err := src.Propose(ctx, putCmd("after", "v")); err != nil || res.Err != nil {
		t.Fatalf("Propose: %v %v", err, res)
	}
	// Make the source's term larger than a fresh node's first one, so the
	// check below shows the term was carried.
	term += 5
	if err := src.Shutdown(); err != nil {
		t.Fatal(err)
	}

	dir, addr := t.TempDir(), freeAddr(t)
	if err := SeedDataDir(SeedConfig{DataDir: dir, NodeName: "node-a", RaftAddr: addr, Term: term}, exp); err != nil {
		t.Fatal(err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".raft-seed-*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary folders left: %v", leftovers)
	}
	filepath.WalkDir(filepath.Join(dir, "raft"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := d.Info(); fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v, want private", p, fi.Mode().Perm())
		}
		return nil
	})

	f := fsm.New()
	n := startTLSNode(t, dir, addr, f)
	waitFor(t, "restored leader", n.readReady)
	if got := n.raft.CurrentTerm(); got <= term {
		t.Fatalf("restored node leads in term %d, not above the snapshot's %d", got, term)
	}
	conf := n.raft.GetConfiguration()
	if err := conf.Error(); err != nil {
		t.Fatal(err)
	}
	if s := conf.Configuration().Servers; len(s) != 1 || s[0].ID != "node-a" || s[0].Address != raft.ServerAddress(addr) || s[0].Suffrage != raft.Voter {
		t.Fatalf("configuration %+v, want node-a alone at %s", s, addr)
	}
	for name, rev := range revs {
		kv, _, err := f.Get(testKey(name), 0)
		if err != nil || kv == nil || kv.ModRevision != rev {
			t.Fatalf("%s after restore: %+v %v, want revision %d", name, kv, err, rev)
		}
	}
	if kv, _, _ := f.Get(testKey("after"), 0); kv != nil {
		t.Fatalf("a write after the export was restored: %+v", kv)
	}
	if n.isRemoved("old-peer") {
		t.Fatal("the source's removal marker was carried to the new cluster")
	}
	if kv, _, _ := f.Get(nodeCAs, 0); kv != nil {
		t.Fatal("the restored state holds the source's node CAs")
	}
	if kv, _, _ := f.Get(clusterCAs, 0); kv != nil {
		t.Fatal("the restored state holds the source's cluster CAs")
	}
	if kv, _, _ := f.Get(signerCAs, 0); kv != nil {
		t.Fatal("the restored state holds the source's signer CAs")
	}
	if kv, _, _ := f.Get(gossipKeys, 0); kv != nil {
		t.Fatal("the source's gossip keyring was carried to the new cluster, whose gossip.key seeds its own")
	}
	res, err := n.Propose(ctx, putCmd("new", "v"))
	if err != nil || res.Err != nil {
		t.Fatalf("Propose after restore: %v %v", err, res)
	}
	if res.Revision <= exp.Index() {
		t.Fatalf("new write at revision %d, not above the snapshot's index %d", res.Revision, exp.Index())
	}
}

// TestSeedDataDirRefusesExistingState: a data directory whose raft folder
// holds anything is refused and left exactly as it was.
func TestSeedDataDirRefusesExistingState(t *testing.T) {
	ctx := testCtx(t)
	dir, addr := t.TempDir(), freeAddr(t)
	n := startTLSNode(t, dir, addr, fsm.New())
	waitFor(t, "leader", n.readReady)
	exp, term, err := n.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	before := tree(t, dir)
	err = SeedDataDir(SeedConfig{DataDir: dir, NodeName: "node-a", RaftAddr: addr, Term: term}, exp)
	if !errors.Is(err, ErrExistingState) {
		t.Fatalf("seeding a used data dir: %v, want ErrExistingState", err)
	}
	if after := tree(t, dir); after != before {
		t.Fatalf("the data dir changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// An empty raft folder is no state: it may be seeded.
	empty := t.TempDir()
	if err := os.Mkdir(filepath.Join(empty, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := SeedDataDir(SeedConfig{DataDir: empty, NodeName: "node-a", RaftAddr: addr, Term: term}, exp); err != nil {
		t.Fatalf("seeding an empty raft folder: %v", err)
	}
	if err := SeedDataDir(SeedConfig{DataDir: empty, NodeName: "node-a", RaftAddr: addr, Term: term}, exp); !errors.Is(err, ErrExistingState) {
		t.Fatalf("seeding twice: %v, want ErrExistingState", err)
	}
}

// tree describes every file under dir: path, size, mode and modification
// time.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %v %d\n", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
