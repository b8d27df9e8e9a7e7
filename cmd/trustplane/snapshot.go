package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/fsm/backup"
)

// snapshotCmd implements "trustplane snapshot save|inspect|restore"
// (docs/OPERATIONS.md, "Backup and restore").
func snapshotCmd(args []string) error {
	if len(args) == 0 {
		return errSnapshotUsage
	}
	switch args[0] {
	case "save":
		return snapshotSave(args[1:])
	case "inspect":
		return snapshotInspect(args[1:])
	case "restore":
		return snapshotRestore(args[1:])
	}
	return errSnapshotUsage
}

var errSnapshotUsage = errors.New(`usage:
  trustplane snapshot save [--kubeconfig F] -o FILE
  trustplane snapshot inspect FILE
  trustplane snapshot restore --file FILE --data-dir DIR [--node-name N] [--raft-addr A] [--raft-advertise-addr A | --advertise-address H]`)

// snapshotSave streams a snapshot from a node's /debug/trustplane/snapshot
// into a temporary file next to FILE, verifies it, and only then links it
// into place: FILE is never overwritten, and never exists half-written.
func snapshotSave(args []string) error {
	fs := flag.NewFlagSet("snapshot save", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", defaultKubeconfig(), "admin kubeconfig (system:masters) of any node")
	out := fs.String("o", "", "file to write; must not exist")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long the whole download may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return errSnapshotUsage
	}
	if _, err := os.Lstat(*out); err == nil {
		return fmt.Errorf("%s exists; snapshot save never overwrites a file", *out)
	}
	client, url, err := operatorClient(*kubeconfig, "/debug/trustplane/snapshot")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError(resp)
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".part-*") // 0600: it holds every Secret
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, resp.Body)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("downloading the snapshot: %w", err)
	}
	f, exp, err := openBackup(tmp.Name())
	if err != nil {
		return fmt.Errorf("the downloaded snapshot does not verify: %w", err)
	}
	if err := os.Link(tmp.Name(), *out); err != nil {
		return fmt.Errorf("saving the snapshot as %s: %w", *out, err)
	}
	fmt.Printf("saved %s\n", *out)
	return printBackup(os.Stdout, *out, f, exp)
}

// snapshotInspect verifies a snapshot file and prints what it holds.
func snapshotInspect(args []string) error {
	fs := flag.NewFlagSet("snapshot inspect", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errSnapshotUsage
	}
	f, exp, err := openBackup(fs.Arg(0))
	if err != nil {
		return err
	}
	return printBackup(os.Stdout, fs.Arg(0), f, exp)
}

// snapshotRestore seeds an empty data directory as a new one-voter
// cluster holding the snapshot's state (cluster.SeedDataDir).
func snapshotRestore(args []string) error {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("snapshot restore", flag.ContinueOnError)
	file := fs.String("file", "", "snapshot file written by trustplane snapshot save")
	dataDir := fs.String("data-dir", "", "data directory of the new node; it must hold no raft state")
	nodeName := fs.String("node-name", host, "name the new node will be started with (serve --node-name)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:6444", "raft address the new node will be started with (serve --raft-addr)")
	raftAdvertise := fs.String("raft-advertise-addr", "", "serve --raft-advertise-addr, if the node will be started with it")
	advertise := fs.String("advertise-address", "", "serve --advertise-address, if the node will be started with it and --raft-addr binds every interface")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The same environment twins as serve, so a chart's init container
	// can run restore with the node's own settings.
	if err := envTwins(fs); err != nil {
		return err
	}
	if *file == "" || *dataDir == "" || fs.NArg() > 0 {
		return errSnapshotUsage
	}
	addr, err := seedRaftAddr(*raftAddr, *raftAdvertise, *advertise)
	if err != nil {
		return err
	}
	f, exp, err := openBackup(*file)
	if err != nil {
		return err
	}
	privateFiles()
	err = cluster.SeedDataDir(cluster.SeedConfig{DataDir: *dataDir, NodeName: *nodeName, RaftAddr: addr, Term: f.Header.Term}, exp)
	if err != nil {
		return err
	}
	fmt.Printf("restored %s into %s as node %s (raft address %s): a one-voter cluster at index %d\n", *file, *dataDir, *nodeName, addr, f.Header.Index)
	if err := printBackup(os.Stdout, *file, f, exp); err != nil {
		return err
	}
	fmt.Printf("\nStart it with: trustplane serve --data-dir %s --node-name %s --raft-addr %s ...\n", *dataDir, *nodeName, *raftAddr)
	fmt.Println("Use the source cluster's CA directory (--ca-dir) so that its certificates stay valid, and start further nodes empty with --join.")
	if s := backup.Summarize(exp); len(s.Encrypted) > 0 {
		fmt.Printf("Values are encrypted at rest with %s: start every node with an --encryption-provider-config holding the file's keys among those (data keys, k8s:enc:trustplane:v1:..., travel in the backup, sealed by the file's key).\n", strings.Join(s.EncryptionKeys(), ", "))
	}
	return nil
}

// seedRaftAddr is the raft address peers will dial, as serve works it out
// (advertise.go): --raft-advertise-addr, else --raft-addr, with an
// unspecified host replaced by --advertise-address.
func seedRaftAddr(bind, explicit, advertise string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return "", fmt.Errorf("--raft-addr %q: %w", bind, err)
	}
	if host != "" && !unspecified(host) {
		return bind, nil
	}
	if advertise == "" || unspecified(advertise) {
		return "", fmt.Errorf("--raft-addr %s binds every interface; set --raft-advertise-addr or --advertise-address as the node will be started with", bind)
	}
	return net.JoinHostPort(advertise, port), nil
}

// openBackup verifies a snapshot file and parses its state.
func openBackup(path string) (*backup.File, *fsm.Export, error) {
	f, err := backup.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	exp, err := f.Load()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, exp, nil
}

// printBackup prints what inspect shows.
func printBackup(w io.Writer, path string, f *backup.File, exp *fsm.Export) error {
	s := backup.Summarize(exp)
	h := f.Header
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file:\t%s (%d bytes, format %d, sha256 verified)\n", path, f.Size, backup.FormatVersion)
	fmt.Fprintf(tw, "index:\t%d\n", h.Index)
	fmt.Fprintf(tw, "term:\t%d\n", h.Term)
	fmt.Fprintf(tw, "highest resourceVersion:\t%d\n", s.MaxRevision)
	fmt.Fprintf(tw, "taken:\t%s by node %s (%s)\n", h.Created.UTC().Format(time.RFC3339), h.Node, h.ServerVersion)
	if h.ClusterID != "" {
		fmt.Fprintf(tw, "cluster id:\t%s\n", h.ClusterID)
	}
	fmt.Fprintf(tw, "history:\t%d versions, compacted below revision %d\n", s.Versions, exp.CompactedRevision())
	for _, p := range s.EncryptionKeys() {
		fmt.Fprintf(tw, "encrypted at rest:\t%d values with %s\n", s.Encrypted[p], p)
	}
	fmt.Fprintln(tw, "\nRESOURCE\tOBJECTS")
	for _, r := range s.Resources() {
		fmt.Fprintf(tw, "%s\t%d\n", r, s.Objects[r])
	}
	return tw.Flush()
}

// Snapshot is api.SnapshotSource (GET /debug/trustplane/snapshot): a copy
// confirmed by a read index, with the node's name and the cluster's id.
func (m membership) Snapshot(ctx context.Context) (*fsm.Export, backup.Header, error) {
	exp, term, err := m.node.Export(ctx)
	if err != nil {
		return nil, backup.Header{}, err
	}
	return exp, backup.Header{Index: exp.Index(), Term: term, Node: m.node.Status().Node, ClusterID: m.clusterID}, nil
}

var _ api.SnapshotSource = membership{}
