package certs

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig is everything a client needs to reach the API with a client
// certificate. The PEM fields are embedded in the file (no file references),
// so the kubeconfig stays valid when copied elsewhere.
type Kubeconfig struct {
	Server      string // https URL of the API
	ClusterName string // names the cluster and the context
	UserName    string
	CAPEM       []byte
	CertPEM     []byte
	KeyPEM      []byte
}

// WriteKubeconfig writes kc to path as a kubeconfig with one cluster, one
// user and one context named ClusterName, which is made current. The file
// holds a private key, so it is written 0600 and atomically: a client that
// reads it while it is being replaced sees the old or the new file, never a
// half-written one.
func WriteKubeconfig(path string, kc Kubeconfig) error {
	switch {
	case kc.Server == "":
		return fmt.Errorf("%w: Server is empty", ErrInvalidKubeconfig)
	case kc.ClusterName == "":
		return fmt.Errorf("%w: ClusterName is empty", ErrInvalidKubeconfig)
	case kc.UserName == "":
		return fmt.Errorf("%w: UserName is empty", ErrInvalidKubeconfig)
	case len(kc.CertPEM) == 0 || len(kc.KeyPEM) == 0:
		return fmt.Errorf("%w: client certificate or key is empty", ErrInvalidKubeconfig)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kc.ClusterName] = &clientcmdapi.Cluster{
		Server:                   kc.Server,
		CertificateAuthorityData: kc.CAPEM,
	}
	cfg.AuthInfos[kc.UserName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: kc.CertPEM,
		ClientKeyData:         kc.KeyPEM,
	}
	cfg.Contexts[kc.ClusterName] = &clientcmdapi.Context{
		Cluster:  kc.ClusterName,
		AuthInfo: kc.UserName,
	}
	cfg.CurrentContext = kc.ClusterName

	data, err := clientcmd.Write(*cfg)
	if err != nil {
		// Serialisation errors from clientcmd describe types, not values.
		return fmt.Errorf("certs: encode kubeconfig for %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("certs: create directory for %s: %w", path, err)
	}
	return writeFileAtomic(path, data, 0o600)
}
