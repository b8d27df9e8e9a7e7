package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
)

// errNoKubeconfig: the data directory holds no admin kubeconfig yet. A
// node writes it once it is ready (bootstrapped and serving).
var errNoKubeconfig = errors.New("no admin kubeconfig yet: the node writes it once it is ready")

// kubeconfigCmd implements "trustplane kubeconfig": it prints the node's
// admin kubeconfig (<data-dir>/admin.kubeconfig) to stdout, with every
// cluster's server URL replaced by --server when given. It exists for
// images without a shell or cat: `kubectl exec POD -- /trustplane
// kubeconfig --server https://127.0.0.1:6443 > tp.kubeconfig`.
//
// --data-dir reads TRUSTPLANE_DATA_DIR when not given, as serve does, so
// inside a node's container the default is that node's data directory.
func kubeconfigCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kubeconfig", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "./trustplane-data", "the node's data directory, which holds admin.kubeconfig")
	server := fs.String("server", "", "https URL to put in the kubeconfig instead of the node's own address (e.g. https://127.0.0.1:6443 behind kubectl port-forward)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := envTwins(fs); err != nil {
		return err
	}
	if *server != "" {
		u, err := url.Parse(*server)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("--server %q: want https://host:port", *server)
		}
	}
	path := filepath.Join(*dataDir, "admin.kubeconfig")
	cfg, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", path, errNoKubeconfig)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if *server != "" {
		for _, c := range cfg.Clusters {
			c.Server = *server
		}
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding the kubeconfig: %w", err)
	}
	_, err = stdout.Write(out)
	return err
}
