package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/certs"
)

// caDirFiles are the files of a --ca-dir that `certs init` creates, and so
// the keys of the Secret `certs init --secret` creates: mounted as a
// volume, that Secret is a --ca-dir.
var caDirFiles = []string{certs.CACertFile, certs.CAKeyFile, certs.NodeCACertFile, certs.NodeCAKeyFile, gossipKeyFile}

const (
	gossipKeyFile = "gossip.key"

	// inClusterNamespaceFile is where a pod finds its own namespace.
	inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

	// secretInitTimeout bounds the API calls of `certs init --secret`.
	secretInitTimeout = time.Minute
)

// errSecretIncomplete: the Secret `certs init --secret` was pointed at
// exists but is not a complete CA directory. It is left alone (never
// overwritten: it may hold a CA that certificates were issued from).
var errSecretIncomplete = errors.New("the Secret exists but lacks CA files")

// certsCmd implements "trustplane certs init": the shared cluster CA, the
// node CA and the gossip key that every node of a multi-node cluster is
// started with. With --dir they are files in a directory (existing files
// are kept); with --secret they are the keys of a Kubernetes Secret
// created through the API (an existing Secret is kept as it is), for a
// Helm install whose image has no shell to copy files with.
func certsCmd(args []string) error {
	if len(args) == 0 || args[0] != "init" {
		return errors.New(`usage: trustplane certs init --dir DIR | --secret NAME [--namespace NS] [--kubeconfig FILE]`)
	}
	fs := flag.NewFlagSet("certs init", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for ca.crt, ca.key, node-ca.crt, node-ca.key and gossip.key")
	secret := fs.String("secret", "", "create these files as the keys of this Kubernetes Secret instead of a directory; an existing Secret is left as it is")
	namespace := fs.String("namespace", "", "the Secret's namespace (default: the pod's own namespace in a cluster, else the kubeconfig context's)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the API that gets the Secret (default: the pod's in-cluster configuration)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch {
	case *dir != "" && *secret != "":
		return errors.New("give --dir or --secret, not both")
	case *dir != "":
		if err := initCADir(*dir); err != nil {
			return err
		}
		fmt.Printf("cluster CA, node CA and gossip key are in %s\n", *dir)
		return nil
	case *secret != "":
		return initCASecret(*secret, *namespace, *kubeconfig)
	default:
		return errors.New("--dir or --secret is required")
	}
}

// initCADir creates what is missing of the CA directory dir.
func initCADir(dir string) error {
	if _, err := certs.LoadOrCreateCA(dir); err != nil {
		return err
	}
	// The node CA is separate: no signer uses it. Running init again on a
	// directory made before the node CA existed adds it.
	if _, err := certs.LoadOrCreateNodeCA(dir); err != nil {
		return err
	}
	keyPath := filepath.Join(dir, gossipKeyFile)
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		if err := os.WriteFile(keyPath, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// initCASecret creates the Secret namespace/name holding a new CA
// directory, unless it exists. An existing complete Secret is success (the
// command is idempotent, so a re-run hook is harmless); an existing
// incomplete one is errSecretIncomplete. Nothing is ever updated or
// overwritten. The files are made in a private temporary directory, which
// is removed afterwards; no key material is printed.
func initCASecret(name, namespace, kubeconfig string) error {
	cfg, ns, err := secretClientConfig(kubeconfig)
	if err != nil {
		return err
	}
	if namespace != "" {
		ns = namespace
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), secretInitTimeout)
	defer cancel()
	secrets := cs.CoreV1().Secrets(ns)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return keptSecret(existing)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}

	tmp, err := os.MkdirTemp("", "trustplane-certs-")
	if err != nil {
		return fmt.Errorf("temporary directory for the CA files: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := initCADir(tmp); err != nil {
		return err
	}
	data := map[string][]byte{}
	for _, f := range caDirFiles {
		b, err := os.ReadFile(filepath.Join(tmp, f))
		if err != nil {
			return err
		}
		data[f] = b
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "trustplane-certs-init"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	created, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Another run created it between our read and our create.
		existing, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("reading Secret %s/%s: %w", ns, name, gerr)
		}
		return keptSecret(existing)
	}
	if err != nil {
		return fmt.Errorf("creating Secret %s/%s: %w", ns, name, err)
	}
	fmt.Printf("created Secret %s/%s with the cluster CA, node CA and gossip key (%s)\n", created.Namespace, created.Name, strings.Join(caDirFiles, ", "))
	return nil
}

// keptSecret reports an existing Secret, which is never changed: fine when
// it holds every CA file, errSecretIncomplete otherwise.
func keptSecret(s *corev1.Secret) error {
	var missing []string
	for _, f := range caDirFiles {
		if len(s.Data[f]) == 0 {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("secret %s/%s: %w: %s (left as it is; delete it, or complete it with `trustplane certs init --dir` and kubectl)", s.Namespace, s.Name, errSecretIncomplete, strings.Join(missing, ", "))
	}
	fmt.Printf("Secret %s/%s exists and holds every CA file; left as it is\n", s.Namespace, s.Name)
	return nil
}

// secretClientConfig is the client configuration and default namespace of
// `certs init --secret`: the kubeconfig's when one is given, else the
// pod's in-cluster configuration and its own namespace.
func secretClientConfig(kubeconfig string) (*rest.Config, string, error) {
	if kubeconfig != "" {
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{})
		cfg, err := cc.ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("--kubeconfig: %w", err)
		}
		ns, _, err := cc.Namespace()
		if err != nil {
			return nil, "", fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, ns, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, "", fmt.Errorf("in-cluster configuration (outside a pod, pass --kubeconfig): %w", err)
	}
	ns, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return nil, "", fmt.Errorf("the pod's namespace: %w", err)
	}
	return cfg, strings.TrimSpace(string(ns)), nil
}
