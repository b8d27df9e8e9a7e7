package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/certs"
)

// runControllers runs the leader-only controllers (api/controllers) until
// ctx ends: while this node leads, they talk to its API at apiURL with
// client certificates of its loopback CA, trusting the cluster CAs of the
// term's start; a step of the cluster CA's rotation starts a new term
// (ca). It returns once they stopped.
func runControllers(ctx context.Context, w *wiring, ident *identity, apiURL string, lb *loopback, ca *clusterCAFollower) {
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
	kcfg.TrustBundles = func() map[string][]byte { return trustBundles(w, ca.roots) }
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
	ca.controller.Store(m)
	m.Run(ctx)
}

// trustBundles are the CA bundles the controllers publish as
// ClusterTrustBundles, by signer: every cluster CA for the API's serving
// certificates and for each built-in signer left at its default (both
// CAs while the cluster CA rotates), else the signer's own CA file.
func trustBundles(w *wiring, roots *certs.Roots) map[string][]byte {
	cluster := roots.PEM()
	out := map[string][]byte{"kubernetes.io/kube-apiserver-serving": cluster}
	s := w.opts.signing.signers(w.pki)
	for name, f := range map[string]controllers.SignerFiles{
		certificatesv1.KubeAPIServerClientSignerName:        s.KubeAPIServerClient,
		certificatesv1.KubeAPIServerClientKubeletSignerName: s.KubeAPIServerClientKubelet,
		certificatesv1.KubeletServingSignerName:             s.KubeletServing,
	} {
		if f.CertFile == filepath.Join(w.pki, clusterSignerCert) {
			out[name] = cluster
			continue
		}
		if b, err := os.ReadFile(f.CertFile); err == nil {
			out[name] = b
		}
	}
	return out
}
