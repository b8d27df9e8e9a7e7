package main

import (
	"flag"
	"fmt"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

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

// signers resolves each signer's files: for a signer given CA files of
// its own (or the shared --cluster-signing-*), where the node keeps its
// active CA (signerCAFiles); else the active cluster CA, which the node
// keeps in pki (clusterSignerCert) as it follows the cluster CA's
// rotation.
func (s *signingFlags) signers(pki string) controllers.Signers {
	pick := func(signer string) controllers.SignerFiles {
		if s.ownFiles(signer).CertFile != "" {
			return signerCAFiles(pki, signer)
		}
		return controllers.SignerFiles{CertFile: filepath.Join(pki, clusterSignerCert), KeyFile: filepath.Join(pki, clusterSignerKey)}
	}
	return controllers.Signers{
		KubeAPIServerClient:        pick(certificatesv1.KubeAPIServerClientSignerName),
		KubeAPIServerClientKubelet: pick(certificatesv1.KubeAPIServerClientKubeletSignerName),
		KubeletServing:             pick(certificatesv1.KubeletServingSignerName),
	}
}
