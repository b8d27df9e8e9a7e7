package main

import (
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/certs"
)

// signingFlags are kube-controller-manager's CSR signing flags. Every
// signer uses the cluster CA unless told otherwise.
type signingFlags struct {
	certFile, keyFile                     string // --cluster-signing-{cert,key}-file: all signers
	clientCert, clientKey                 string // kube-apiserver-client
	kubeletClientCert, kubeletClientKey   string // kube-apiserver-client-kubelet
	kubeletServingCert, kubeletServingKey string // kubelet-serving
	duration                              time.Duration
}

func (s *signingFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.certFile, "cluster-signing-cert-file", "", "CA certificate (PEM) the built-in CSR signers sign with (default: the cluster CA)")
	fs.StringVar(&s.keyFile, "cluster-signing-key-file", "", "key of --cluster-signing-cert-file")
	fs.StringVar(&s.clientCert, "cluster-signing-kube-apiserver-client-cert-file", "", "CA certificate for kubernetes.io/kube-apiserver-client (overrides --cluster-signing-cert-file)")
	fs.StringVar(&s.clientKey, "cluster-signing-kube-apiserver-client-key-file", "", "its key")
	fs.StringVar(&s.kubeletClientCert, "cluster-signing-kubelet-client-cert-file", "", "CA certificate for kubernetes.io/kube-apiserver-client-kubelet")
	fs.StringVar(&s.kubeletClientKey, "cluster-signing-kubelet-client-key-file", "", "its key")
	fs.StringVar(&s.kubeletServingCert, "cluster-signing-kubelet-serving-cert-file", "", "CA certificate for kubernetes.io/kubelet-serving")
	fs.StringVar(&s.kubeletServingKey, "cluster-signing-kubelet-serving-key-file", "", "its key")
	fs.DurationVar(&s.duration, "cluster-signing-duration", 365*24*time.Hour, "longest lifetime of a signed certificate; a CSR's expirationSeconds may only shorten it")
}

// validate checks that files come in pairs, as kube-controller-manager does.
func (s *signingFlags) validate() error {
	pairs := [][3]string{
		{"--cluster-signing-cert-file", s.certFile, s.keyFile},
		{"--cluster-signing-kube-apiserver-client-cert-file", s.clientCert, s.clientKey},
		{"--cluster-signing-kubelet-client-cert-file", s.kubeletClientCert, s.kubeletClientKey},
		{"--cluster-signing-kubelet-serving-cert-file", s.kubeletServingCert, s.kubeletServingKey},
	}
	for _, p := range pairs {
		if (p[1] == "") != (p[2] == "") {
			return fmt.Errorf("%s and its key file must be given together", p[0])
		}
	}
	if s.duration <= 0 {
		return fmt.Errorf("--cluster-signing-duration %v: must be positive", s.duration)
	}
	return nil
}

// signers resolves each signer's files: its own flags, else the shared
// signing flags, else the cluster CA in caDir.
func (s *signingFlags) signers(caDir string) controllers.Signers {
	def := controllers.SignerFiles{CertFile: filepath.Join(caDir, certs.CACertFile), KeyFile: filepath.Join(caDir, certs.CAKeyFile)}
	if s.certFile != "" {
		def = controllers.SignerFiles{CertFile: s.certFile, KeyFile: s.keyFile}
	}
	pick := func(cert, key string) controllers.SignerFiles {
		if cert != "" {
			return controllers.SignerFiles{CertFile: cert, KeyFile: key}
		}
		return def
	}
	return controllers.Signers{
		KubeAPIServerClient:        pick(s.clientCert, s.clientKey),
		KubeAPIServerClientKubelet: pick(s.kubeletClientCert, s.kubeletClientKey),
		KubeletServing:             pick(s.kubeletServingCert, s.kubeletServingKey),
	}
}

// clientCAPool is the pool the API verifies client certificates with: the
// cluster CA and the CAs of the two client signers, so that a certificate
// a CSR got from them authenticates.
func clientCAPool(ca *certs.CA, s controllers.Signers) (*x509.CertPool, error) {
	pool := ca.Pool()
	for _, f := range []controllers.SignerFiles{s.KubeAPIServerClient, s.KubeAPIServerClientKubelet} {
		pem, err := os.ReadFile(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("client signer CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client signer CA %s holds no PEM certificate", f.CertFile)
		}
	}
	return pool, nil
}
