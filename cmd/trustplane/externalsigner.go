package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/externalsigner"
)

// externalSignerCmd runs the ExternalJWTSigner sidecar of a kube-apiserver
// (externalsigner): kube's gRPC API on a unix socket, each call done
// through trustplane with the kubeconfig's identity.
func externalSignerCmd(args []string) error {
	fs := flag.NewFlagSet("external-signer", flag.ContinueOnError)
	socket := fs.String("socket", "", "unix socket to serve kube's ExternalJWTSigner on: the kube-apiserver's --service-account-signing-endpoint")
	kubeconfig := fs.String("kubeconfig", defaultKubeconfig(), "kubeconfig of the trustplane cluster, with the identity RBAC lets sign for the API server's issuer and audiences")
	cfg := externalsigner.Config{}
	fs.DurationVar(&cfg.Timeout, "timeout", externalsigner.DefaultTimeout, "bound of each call to trustplane: past it a token request fails")
	fs.DurationVar(&cfg.RefreshHint, "keys-refresh", externalsigner.DefaultRefreshHint, "how often the API server fetches the keys again")
	fs.DurationVar(&cfg.MaxTokenExpiration, "max-token-expiration", externalsigner.DefaultMaxTokenExpiration, "the longest token the API server may issue (its --service-account-max-token-expiration may not exceed it; at least 10m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" {
		return errors.New("--socket is required")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", *kubeconfig, err)
	}
	cfg.REST = rc
	s, err := externalsigner.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "serving kube's ExternalJWTSigner on %s for %s\n", *socket, rc.Host)
	return s.Serve(ctx, *socket)
}
