package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/controllers"
)

// runControllers runs the controllers (api/controllers) until ctx ends:
// while this node holds their lease (controllers.Host, standing by
// cluster.Node.StandsForControllers), they talk to its API at apiURL with
// client certificates of its loopback CA, trusting the cluster CAs of the
// term's start; a step of the cluster CA's rotation starts a new term
// (ca). It returns once they stopped.
func runControllers(ctx context.Context, w *wiring, ident *identity, apiURL string, lb *loopback, ca *caFollower) {
	log := w.log.With("component", "controllers")
	if !w.opts.controllers {
		log.Info("controllers are off (--controllers=false)")
		return
	}
	kcfg := controllers.DefaultKubeConfig()
	kcfg.Host = apiURL
	kcfg.CAPEM = ca.roots.PEM
	kcfg.Issuer = lb
	kcfg.TokenGenerator = ident.legacyTokens
	kcfg.Signers = w.opts.signing.signers(w.pki)
	kcfg.SigningDuration = w.opts.signing.duration
	kcfg.TrustBundles = func() map[string][]byte { return trustBundles(ca) }
	kcfg.QPS, kcfg.Burst = float32(w.opts.controllersQPS), w.opts.controllersBurst
	kcfg.UserAgent = fmt.Sprintf("kube-controller-manager/%s (%s/%s) trustplane", api.Version.GitVersion, runtime.GOOS, runtime.GOARCH)
	kcfg.Logger = log
	if w.opts.multiNode() {
		kcfg.EstablishDelay = 5 * time.Second
	}
	kcfg.CustomResources = w.reg
	kube, err := controllers.NewKube(kcfg)
	if err != nil {
		log.Error("controllers are off", "error", err)
		return
	}
	hcfg := controllers.DefaultHostConfig()
	hcfg.Stand = w.node
	hcfg.Client = kube.LeaseClient
	hcfg.Identity = w.opts.nodeName
	hcfg.Logger = log
	host, err := controllers.NewHost(hcfg)
	if err != nil {
		log.Error("controllers are off", "error", err)
		return
	}
	mcfg := controllers.DefaultConfig()
	mcfg.Leadership = host
	mcfg.Holds = "this node holds the controllers' lease"
	mcfg.Runner = kube
	mcfg.Logger = log
	m, err := controllers.New(mcfg)
	if err != nil {
		log.Error("controllers are off", "error", err)
		return
	}
	ca.controller.Store(m)
	go host.Run(ctx)
	m.Run(ctx)
}

// trustBundles are the CA bundles the controllers publish as
// ClusterTrustBundles, by signer: every cluster CA for the API's serving
// certificates and for each built-in signer left at its default, else the
// signer's own CAs; both CAs of a root while it rotates.
func trustBundles(f *caFollower) map[string][]byte {
	cluster := f.roots.PEM()
	out := map[string][]byte{"kubernetes.io/kube-apiserver-serving": cluster}
	for _, signer := range builtinSigners {
		out[signer] = cluster
	}
	for _, sc := range f.signers {
		out[sc.signer] = sc.roots.PEM()
	}
	return out
}
