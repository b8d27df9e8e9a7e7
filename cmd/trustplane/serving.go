package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/internal/failpoint"
)

// loadNodeCA loads the node CA from caDir. A node of a multi-node cluster
// must share it with its peers, so it never creates one: the operator runs
// `trustplane certs init` (which adds a missing node CA to an existing CA
// directory). A one-node cluster creates its own.
func loadNodeCA(caDir string, multiNode bool) (*certs.CA, error) {
	if !multiNode {
		ca, err := certs.LoadOrCreateNodeCA(caDir)
		if err != nil {
			return nil, fmt.Errorf("node CA: %w", err)
		}
		return ca, nil
	}
	ca, err := certs.LoadNodeCA(caDir)
	if errors.Is(err, certs.ErrCANotFound) {
		return nil, fmt.Errorf("node CA: %w; every node of a cluster needs the same node CA: run `trustplane certs init --dir %s` once and copy the directory to every node", err, caDir)
	}
	if err != nil {
		return nil, fmt.Errorf("node CA: %w", err)
	}
	return ca, nil
}

// refuseNodeCASigners refuses to start when a CSR signer is configured
// with a node CA the node trusts: whoever could get a CSR signed would
// become a node.
func refuseNodeCASigners(nodeCAs []*x509.Certificate, s controllers.Signers) error {
	for name, f := range map[string]controllers.SignerFiles{
		"kube-apiserver-client": s.KubeAPIServerClient, "kube-apiserver-client-kubelet": s.KubeAPIServerClientKubelet, "kubelet-serving": s.KubeletServing,
	} {
		pemBytes, err := os.ReadFile(f.CertFile)
		if err != nil {
			return fmt.Errorf("%s signer CA: %w", name, err)
		}
		if slices.ContainsFunc(nodeCAs, func(c *x509.Certificate) bool { return certs.HoldsCert(pemBytes, c) }) {
			return fmt.Errorf("the %s signer is configured with the node CA (%s); no signer may use it, because its certificates would be node identities", name, f.CertFile)
		}
	}
	return nil
}

// servingRequest is the API's serving certificate: kube's names for the
// kubernetes Service, loopback, the node name and hosts (the listen host,
// the advertised address and --tls-san). EnsurePair reissues the stored
// pair whenever one of these is missing from it, so a node restarted with
// another address (a pod's new IP) or new --tls-san names gets a matching
// certificate on its next start.
func servingRequest(nodeName string, clusterIP net.IP, hosts ...string) certs.Request {
	r := certs.Request{
		CommonName:  "trustplane-apiserver",
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), clusterIP},
		Server:      true,
	}
	r.AddHost(nodeName)
	for _, h := range hosts {
		r.AddHost(h)
	}
	return r
}

// validateTLSSANs checks --tls-san: every entry an IP address or a DNS
// name (a leading "*." wildcard allowed), as a certificate SAN must be.
func validateTLSSANs(list string) error {
	for _, h := range splitList(list) {
		if net.ParseIP(h) != nil {
			continue
		}
		errs := validation.IsDNS1123Subdomain(h)
		if strings.HasPrefix(h, "*.") {
			errs = validation.IsWildcardDNS1123Subdomain(h)
		}
		if len(errs) > 0 {
			return fmt.Errorf("--tls-san %q: neither an IP address nor a DNS name: %s", h, strings.Join(errs, "; "))
		}
	}
	return nil
}

// firstServiceIP is the first host address of the service range, the
// ClusterIP kube-apiserver gives default/kubernetes.
func firstServiceIP(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	ip := make(net.IP, len(n.IP))
	copy(ip, n.IP)
	ip[len(ip)-1]++
	if !n.Contains(ip) {
		return nil, fmt.Errorf("--service-cluster-ip-range %s has no host addresses", cidr)
	}
	return ip, nil
}

// apiURL is the URL clients use: the bound address, with an unspecified
// listen host replaced by loopback.
func apiURL(bound, listenHost string) string {
	host, port, _ := net.SplitHostPort(bound)
	if ip := net.ParseIP(listenHost); ip == nil || !ip.IsUnspecified() {
		host = listenHost
	} else {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, port)
}

// versionString is what `trustplane version` prints: the release (VERSION,
// package trustplane), the commit when the Makefile stamped one, the
// Kubernetes API level served, and the version of each format the node
// writes. A binary built with -tags failpoints says so
// at the end (" +failpoints"): the chaos tool checks for it before relying
// on <data-dir>/failpoints.
func versionString() string {
	v := "trustplane v" + trustplane.Release() + " ("
	if c := trustplane.Commit(); c != "" {
		v += "commit " + c + ", "
	}
	v += "Kubernetes " + strings.TrimSuffix(api.Version.GitVersion, "+trustplane") + ", " + goruntime.Version() + " " + goruntime.GOOS + "/" + goruntime.GOARCH + "; formats: "
	for i, f := range trustplane.Formats() {
		if i > 0 {
			v += ", "
		}
		v += fmt.Sprintf("%s %d", f.Name, f.Version)
		if f.Reads.Min != f.Reads.Max {
			v += fmt.Sprintf(" (reads %d-%d)", f.Reads.Min, f.Reads.Max)
		}
	}
	v += ")"
	if failpoint.Enabled {
		v += " +failpoints"
	}
	return v
}
