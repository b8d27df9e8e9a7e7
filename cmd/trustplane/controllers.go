package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/controllers"
)

// runControllers runs the leader-only controllers (api/controllers) until
// ctx ends: while this node leads, they talk to its API at apiURL with
// client certificates from the cluster CA. It returns once they stopped.
func runControllers(ctx context.Context, w *wiring, ident *identity, apiURL string) {
	log := w.log.With("component", "controllers")
	if !w.opts.controllers {
		log.Info("controllers are off (--controllers=false)")
		return
	}
	kcfg := controllers.DefaultKubeConfig()
	kcfg.Host = apiURL
	kcfg.CAPEM = w.ca.CertPEM
	kcfg.Issuer = w.ca
	kcfg.TokenGenerator = ident.legacyTokens
	kcfg.Signers = w.opts.signing.signers(w.caDir)
	kcfg.SigningDuration = w.opts.signing.duration
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
	mcfg := controllers.DefaultConfig()
	mcfg.Leadership = w.node
	mcfg.Runner = kube
	mcfg.Logger = log
	m, err := controllers.New(mcfg)
	if err != nil {
		log.Error("controllers are off", "error", err)
		return
	}
	m.Run(ctx)
}
