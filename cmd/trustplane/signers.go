package main

import (
	"cmp"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"

	"github.com/trustplane/trustplane/api/controllers"
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
// signing flags, else the active cluster CA, which the node keeps in pki
// (clusterSignerCert) as it follows the cluster CA's rotation.
func (s *signingFlags) signers(pki string) controllers.Signers {
	def := controllers.SignerFiles{CertFile: filepath.Join(pki, clusterSignerCert), KeyFile: filepath.Join(pki, clusterSignerKey)}
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

// ownClientCAs are the CAs of the client signers given their own files
// (kube-apiserver-client and kube-apiserver-client-kubelet), so that a
// certificate a CSR got from them authenticates. A signer left at the
// default signs with the active cluster CA, which the cluster CAs cover.
func (s *signingFlags) ownClientCAs() ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, f := range []string{cmp.Or(s.clientCert, s.certFile), cmp.Or(s.kubeletClientCert, s.certFile)} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("client signer CA: %w", err)
		}
		cs, err := certutil.ParseCertsPEM(b)
		if err != nil || len(cs) == 0 {
			return nil, fmt.Errorf("client signer CA %s holds no PEM certificate", f)
		}
		out = append(out, cs...)
	}
	return out, nil
}
