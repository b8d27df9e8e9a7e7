// Command reference-certs writes the certificates, keys and kubeconfigs
// that kube-apiserver, etcd and kube-controller-manager need for make
// reference, laid out as kubeadm lays them out: etcd has its own CA; one
// cluster CA signs the serving certificate and the client certificates, is
// the client CA kube-apiserver trusts, and is the CA the controller
// manager's CSR signers sign with. Every key is ECDSA P-256, as
// trustplane's are, so both sides make and check the same kind of
// signatures.
//
// It writes into --dir:
//
//	ca.crt, ca.key                     cluster CA
//	etcd-ca.crt, etcd-ca.key           etcd's own CA, as kubeadm has
//	etcd-server.crt, etcd-server.key   etcd's serving cert: 127.0.0.1, localhost
//	apiserver-etcd-client.crt, .key    kube-apiserver's client cert for etcd
//	apiserver.crt, apiserver.key       serving cert: 127.0.0.1, localhost, the kubernetes Service names and IP
//	sa.key, sa.pub                     ServiceAccount token signing key
//	admin.crt, admin.key               client cert kubernetes-admin, group system:masters
//	controller-manager.crt, .key       client cert system:kube-controller-manager
//	admin.kubeconfig                   for kubectl and trustplane bench
//	controller-manager.kubeconfig      for kube-controller-manager
//
// Files already present are kept, so a restart reuses them; --force
// replaces them all.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func main() {
	dir := flag.String("dir", "", "directory to write into (created if absent)")
	server := flag.String("server", "https://127.0.0.1:16443", "kube-apiserver URL the kubeconfigs point at")
	serviceIP := flag.String("service-ip", "10.96.0.1", "first IP of --service-cluster-ip-range (the kubernetes Service), put in the serving cert")
	force := flag.Bool("force", false, "replace files that already exist")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "reference-certs: --dir is required")
		os.Exit(2)
	}
	if err := run(*dir, *server, *serviceIP, *force); err != nil {
		fmt.Fprintln(os.Stderr, "reference-certs:", err)
		os.Exit(1)
	}
}

func run(dir, server, serviceIP string, force bool) error {
	svcIP := net.ParseIP(serviceIP)
	if svcIP == nil {
		return fmt.Errorf("--service-ip %q is not an IP", serviceIP)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	if !force {
		if _, err := os.Stat(path("admin.kubeconfig")); err == nil {
			return nil // written by an earlier start; keep everything
		}
	}

	now := time.Now()
	caKey, caCert, err := newCA(path("ca"), "trustplane-reference-ca", now)
	if err != nil {
		return err
	}
	etcdCAKey, etcdCACert, err := newCA(path("etcd-ca"), "trustplane-reference-etcd-ca", now)
	if err != nil {
		return err
	}

	// issue writes base.crt and base.key: a new key and a certificate for
	// it made from tmpl, signed by ca for one year.
	issue := func(ca *x509.Certificate, caKey crypto.Signer, base string, tmpl *x509.Certificate) error {
		k, err := newKey()
		if err != nil {
			return err
		}
		tmpl.NotBefore = now.Add(-time.Hour)
		tmpl.NotAfter = now.AddDate(1, 0, 0)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, _, err := sign(tmpl, ca, k.Public(), caKey)
		if err != nil {
			return err
		}
		return writeCertKey(path(base+".crt"), path(base+".key"), der, k)
	}
	if err := issue(etcdCACert, etcdCAKey, "etcd-server", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd-server"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}); err != nil {
		return err
	}
	if err := issue(etcdCACert, etcdCAKey, "apiserver-etcd-client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	if err := issue(caCert, caKey, "apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, svcIP},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return err
	}
	if err := issue(caCert, caKey, "admin", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	if err := issue(caCert, caKey, "controller-manager", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:kube-controller-manager"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(path("sa.key"), saKey); err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o644); err != nil {
		return err
	}

	// The kubeconfigs last: admin.kubeconfig existing means every file is.
	if err := writeKubeconfig(path("controller-manager.kubeconfig"), server, "system:kube-controller-manager",
		path("ca.crt"), path("controller-manager.crt"), path("controller-manager.key")); err != nil {
		return err
	}
	return writeKubeconfig(path("admin.kubeconfig"), server, "kubernetes-admin",
		path("ca.crt"), path("admin.crt"), path("admin.key"))
}

// newCA writes base.crt and base.key: a new self-signed CA for ten years.
func newCA(base, name string, now time.Time) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, cert, err := sign(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	return key, cert, writeCertKey(base+".crt", base+".key", der, key)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// sign makes tmpl into a certificate for pub signed by parent's key
// signer, with a random serial number.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func writeCertKey(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeKubeconfig writes a kubeconfig for user at server with the CA and
// client certificate embedded, so it can be copied elsewhere.
func writeKubeconfig(path, server, user, caPath, certPath, keyPath string) error {
	ca, err1 := os.ReadFile(caPath)
	cert, err2 := os.ReadFile(certPath)
	key, err3 := os.ReadFile(keyPath)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	const name = "reference"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}
