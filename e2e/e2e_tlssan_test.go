package e2e_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"testing"
	"time"
)

// servedCertificate is the leaf certificate n's API presents.
func servedCertificate(t *testing.T, n *node) *x509.Certificate {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", n.listen, &tls.Config{RootCAs: n.caPool(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func hasIP(c *x509.Certificate, ip string) bool {
	return slices.ContainsFunc(c.IPAddresses, net.ParseIP(ip).Equal)
}

// TestServingCertificateFollowsAddressAndTLSSAN: the serving certificate
// carries --tls-san and the advertised address; restarted with another
// advertised address (a pod's new IP) the node serves a certificate for the
// new one, not the old.
func TestServingCertificateFollowsAddressAndTLSSAN(t *testing.T) {
	// The advertised addresses are documentation addresses nothing dials
	// (a one-node cluster forwards nothing): only the certificate names them.
	n := startNode(t, "--advertise-address", "203.0.113.10", "--tls-san", "trustplane.tp.svc,trustplane-0.trustplane-headless.tp.svc.cluster.local,198.51.100.7")
	c := servedCertificate(t, n)
	for _, d := range []string{"trustplane.tp.svc", "trustplane-0.trustplane-headless.tp.svc.cluster.local"} {
		if !slices.Contains(c.DNSNames, d) {
			t.Errorf("serving certificate lacks --tls-san %s: %v", d, c.DNSNames)
		}
	}
	for _, ip := range []string{"203.0.113.10", "198.51.100.7"} {
		if !hasIP(c, ip) {
			t.Errorf("serving certificate lacks %s: %v", ip, c.IPAddresses)
		}
	}

	n.args = []string{"--advertise-address", "203.0.113.11", "--tls-san", "trustplane.tp.svc,trustplane-0.trustplane-headless.tp.svc.cluster.local,198.51.100.7"}
	n.restart()
	c2 := servedCertificate(t, n)
	if !hasIP(c2, "203.0.113.11") || hasIP(c2, "203.0.113.10") {
		t.Fatalf("after the address changed the certificate's IPs are %v; want 203.0.113.11 and not 203.0.113.10", c2.IPAddresses)
	}
	if !slices.Contains(c2.DNSNames, "trustplane.tp.svc") {
		t.Fatalf("the reissued certificate lost a --tls-san name: %v", c2.DNSNames)
	}

	// Unchanged flags: the stored pair is reused, not churned.
	n.restart()
	if c3 := servedCertificate(t, n); !c3.Equal(c2) {
		t.Fatal("a restart with unchanged addresses issued a new serving certificate")
	}
}
