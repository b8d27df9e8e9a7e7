package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trustplane/trustplane/certs"
)

// certsCmd implements "trustplane certs init --dir D": the shared cluster
// CA, the node CA and the gossip key that every node of a multi-node
// cluster is started with. Existing files are kept.
func certsCmd(args []string) error {
	if len(args) == 0 || args[0] != "init" {
		return errors.New(`usage: trustplane certs init --dir DIR`)
	}
	fs := flag.NewFlagSet("certs init", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for ca.crt, ca.key, node-ca.crt, node-ca.key and gossip.key")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	if _, err := certs.LoadOrCreateCA(*dir); err != nil {
		return err
	}
	// The node CA is separate: no signer uses it. Running init again on a
	// directory made before the node CA existed adds it.
	if _, err := certs.LoadOrCreateNodeCA(*dir); err != nil {
		return err
	}
	keyPath := filepath.Join(*dir, "gossip.key")
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		if err := os.WriteFile(keyPath, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
			return err
		}
	}
	fmt.Printf("cluster CA, node CA and gossip key are in %s\n", *dir)
	return nil
}
