package main

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/trustplane/trustplane/api/caroots"
	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/certs"
)

// builtinSigners are the built-in CSR signers, in the order their CAs are
// wired; the first two issue client certificates, which the API verifies.
var builtinSigners = []string{
	certificatesv1.KubeAPIServerClientSignerName,
	certificatesv1.KubeAPIServerClientKubeletSignerName,
	certificatesv1.KubeletServingSignerName,
}

// clientSigner says whether signer issues client certificates the API
// verifies.
func clientSigner(signer string) bool { return signer != certificatesv1.KubeletServingSignerName }

// signerShort is signer's name after kubernetes.io/.
func signerShort(signer string) string { return strings.TrimPrefix(signer, "kubernetes.io/") }

// ownFiles are the CA files a signer was given by flag (its own, else the
// shared --cluster-signing-*), zero when it signs with the cluster CA.
func (s *signingFlags) ownFiles(signer string) controllers.SignerFiles {
	own := map[string]controllers.SignerFiles{
		certificatesv1.KubeAPIServerClientSignerName:        {CertFile: s.clientCert, KeyFile: s.clientKey},
		certificatesv1.KubeAPIServerClientKubeletSignerName: {CertFile: s.kubeletClientCert, KeyFile: s.kubeletClientKey},
		certificatesv1.KubeletServingSignerName:             {CertFile: s.kubeletServingCert, KeyFile: s.kubeletServingKey},
	}[signer]
	if own.CertFile == "" {
		own = controllers.SignerFiles{CertFile: s.certFile, KeyFile: s.keyFile}
	}
	return own
}

// signerCAFiles are where a node keeps the active CA of a signer with CA
// files of its own, for kube's file-reading signer: the flag's files seed
// the replicated set, from then on the set is the truth.
func signerCAFiles(pki, signer string) controllers.SignerFiles {
	short := signerShort(signer)
	return controllers.SignerFiles{CertFile: filepath.Join(pki, "signer-"+short+".crt"), KeyFile: filepath.Join(pki, "signer-"+short+".key")}
}

// signerTrustFile keeps the CAs of a signer a node trusted last.
func signerTrustFile(signer string) string { return "signer-trust-" + signerShort(signer) + ".pem" }

// signerCA is one signer's replicated CAs on this node.
type signerCA struct {
	signer string
	seed   *certs.CA
	roots  *certs.Roots
	rev    uint64
	store  *caroots.Store
}

// signerCAsAtStart loads, for every built-in signer with CA files of its
// own, the CA the files hold (the seed) and the CAs the node trusted last,
// and writes the active one where kube's signer reads it when the node
// has none there yet.
func signerCAsAtStart(log *slog.Logger, s *signingFlags, dataDir, pki string) ([]*signerCA, error) {
	var out []*signerCA
	for _, signer := range builtinSigners {
		f := s.ownFiles(signer)
		if f.CertFile == "" {
			continue
		}
		certPEM, err := os.ReadFile(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("%s signer CA: %w", signer, err)
		}
		keyPEM, err := os.ReadFile(f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s signer CA: %w", signer, err)
		}
		seed, err := certs.ParseCA(append(append([]byte{}, certPEM...), keyPEM...))
		if err != nil {
			return nil, fmt.Errorf("%s signer CA %s: %w", signer, f.CertFile, err)
		}
		roots, rev, err := casAtStart(log, caroots.SignerKind(signer), seed, f.CertFile, filepath.Join(dataDir, signerTrustFile(signer)))
		if err != nil {
			return nil, err
		}
		files := signerCAFiles(pki, signer)
		if _, err := os.Stat(files.KeyFile); err != nil {
			if err := seed.WriteFiles(files.CertFile, files.KeyFile); err != nil {
				return nil, fmt.Errorf("%s signer CA: %w", signer, err)
			}
		}
		out = append(out, &signerCA{signer: signer, seed: seed, roots: certs.NewRoots(signer, roots...), rev: rev})
	}
	return out, nil
}

// signerRoots are the CAs trusted now of the signers with CA files of
// their own (what a node CA must never be).
func signerRoots(scs []*signerCA) func() []*x509.Certificate {
	return func() []*x509.Certificate {
		var out []*x509.Certificate
		for _, sc := range scs {
			out = append(out, sc.roots.Roots()...)
		}
		return out
	}
}

// signerBundles are the live CA bundles of the client signers with CA
// files of their own (sources of the API's client CAs).
func signerBundles(scs []*signerCA) []dynamiccertificates.CAContentProvider {
	var out []dynamiccertificates.CAContentProvider
	for _, sc := range scs {
		if clientSigner(sc.signer) {
			out = append(out, sc.roots)
		}
	}
	return out
}

// setupSignerCAs builds each signer's replicated CAs (api/caroots): its
// roots follow them live; finish waits for the longest lifetime of a
// certificate the signer issues.
func setupSignerCAs(w *wiring, scs []*signerCA, follow *caFollower, forbidden func() []*x509.Certificate) {
	for _, sc := range scs {
		sc.store = setupCARoot(w, caRoot{
			kind: caroots.SignerKind(sc.signer), trust: sc.roots,
			trustFile: filepath.Join(w.opts.dataDir, signerTrustFile(sc.signer)), trustRev: sc.rev,
			onChange:  follow.onSignerChange(sc.signer),
			forbidden: forbidden, retireAfter: w.opts.signing.duration,
		})
	}
}
