package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func mustCA(t *testing.T) *CA {
	t.Helper()
	ca, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatalf("LoadOrCreateCA: %v", err)
	}
	return ca
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if _, err := LoadCA(dir); !errors.Is(err, ErrCANotFound) {
		t.Fatalf("LoadCA on empty dir: got %v, want ErrCANotFound", err)
	}
	created, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	c := created.Cert
	if !c.IsCA || c.Subject.CommonName != "trustplane-ca" {
		t.Errorf("CA cert: IsCA=%v CN=%q", c.IsCA, c.Subject.CommonName)
	}
	wantKU := x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	if c.KeyUsage != wantKU {
		t.Errorf("KeyUsage = %v, want %v", c.KeyUsage, wantKU)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life < 9*365*24*time.Hour {
		t.Errorf("CA lifetime %s, want about 10 years", life)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %o, want 700", m)
	}
	if m := mode(t, filepath.Join(dir, CAKeyFile)); m != 0o600 {
		t.Errorf("key mode %o, want 600", m)
	}

	for name, load := range map[string]func(string) (*CA, error){
		"LoadOrCreateCA": LoadOrCreateCA,
		"LoadCA":         LoadCA,
	} {
		t.Run(name+" loads the same CA", func(t *testing.T) {
			got, err := load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Cert.Equal(created.Cert) || !bytes.Equal(got.CertPEM, created.CertPEM) {
				t.Fatal("loaded CA differs from created CA")
			}
			if !keyMatches(got.Cert, got.Key) {
				t.Fatal("loaded key does not match certificate")
			}
		})
	}
}

func TestCAHalfPresent(t *testing.T) {
	tests := []struct {
		name   string
		remove string
	}{
		{"cert without key is an error", CAKeyFile},
		{"key without cert is an error", CACertFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, tc.remove)); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadDir(dir)
			for _, load := range []func(string) (*CA, error){LoadOrCreateCA, LoadCA} {
				if _, err := load(dir); !errors.Is(err, ErrCAIncomplete) {
					t.Fatalf("got %v, want ErrCAIncomplete", err)
				}
			}
			after, _ := os.ReadDir(dir)
			if len(before) != len(after) {
				t.Fatal("half-present CA was modified")
			}
		})
	}
}

func TestCAMismatchedKey(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if _, err := LoadOrCreateCA(d); err != nil {
			t.Fatal(err)
		}
	}
	key, err := os.ReadFile(filepath.Join(b, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, CAKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadCA(a)
	if !errors.Is(err, ErrInvalidCA) {
		t.Fatalf("got %v, want ErrInvalidCA", err)
	}
	if bytes.Contains([]byte(err.Error()), key[30:60]) {
		t.Fatal("error quotes key material")
	}
}

func TestIssue(t *testing.T) {
	ca := mustCA(t)
	ip := net.ParseIP("10.1.2.3")
	tests := []struct {
		name    string
		req     Request
		usages  []x509.ExtKeyUsage
		wantErr error
	}{
		{
			name:   "server cert carries SANs and server auth",
			req:    Request{CommonName: "node-a", DNSNames: []string{"node-a", "localhost"}, IPAddresses: []net.IP{ip}, Server: true},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		},
		{
			name:   "client cert carries groups and client auth",
			req:    Request{CommonName: "admin", Organization: []string{"system:masters"}, Client: true},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name:   "node cert has both usages",
			req:    Request{CommonName: "node-b", DNSNames: []string{"node-b"}, Client: true, Server: true, Duration: time.Hour},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		},
		{name: "no names is rejected", req: Request{Client: true}, wantErr: ErrInvalidRequest},
		{name: "no usage is rejected", req: Request{CommonName: "x"}, wantErr: ErrInvalidRequest},
		{name: "negative duration is rejected", req: Request{CommonName: "x", Client: true, Duration: -time.Second}, wantErr: ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.Issue(tc.req)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c := pair.Leaf
			for _, u := range tc.usages {
				if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
					t.Errorf("verify for usage %v: %v", u, err)
				}
			}
			if !slices.Equal(c.ExtKeyUsage, tc.usages) {
				t.Errorf("ExtKeyUsage = %v, want %v", c.ExtKeyUsage, tc.usages)
			}
			if c.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
				t.Errorf("KeyUsage = %v", c.KeyUsage)
			}
			if c.IsCA {
				t.Error("leaf is a CA")
			}
			if c.Subject.CommonName != tc.req.CommonName || !slices.Equal(c.Subject.Organization, tc.req.Organization) {
				t.Errorf("subject = %v", c.Subject)
			}
			if !slices.Equal(c.DNSNames, tc.req.DNSNames) {
				t.Errorf("DNSNames = %v, want %v", c.DNSNames, tc.req.DNSNames)
			}
			if len(c.IPAddresses) != len(tc.req.IPAddresses) || (len(c.IPAddresses) > 0 && !c.IPAddresses[0].Equal(ip)) {
				t.Errorf("IPAddresses = %v, want %v", c.IPAddresses, tc.req.IPAddresses)
			}
			if c.SerialNumber.BitLen() < 64 {
				t.Errorf("serial %v is not random 128-bit", c.SerialNumber)
			}
			want := tc.req.Duration
			if want == 0 {
				want = defaultDuration
			}
			if got := c.NotAfter.Sub(c.NotBefore); got != want+backdate {
				t.Errorf("validity %s, want %s", got, want+backdate)
			}
		})
	}
}

func TestEnsurePair(t *testing.T) {
	ca := mustCA(t)
	otherCA := mustCA(t)
	base := Request{CommonName: "node-a", DNSNames: []string{"node-a"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Client: true, Server: true}

	tests := []struct {
		name    string
		prepare func(t *testing.T, certFile, keyFile string) // runs after a first EnsurePair with base
		req     Request
		reuse   bool
	}{
		{name: "valid pair is reused", req: base, reuse: true},
		{
			name:  "subset of SANs is still covered",
			req:   Request{CommonName: "node-a", DNSNames: []string{"node-a"}, Client: true},
			reuse: true,
		},
		{
			name: "new DNS name forces reissue",
			req:  withDNS(base, "node-a.example"),
		},
		{
			name: "changed organization forces reissue",
			req:  withOrg(base, "system:nodes"),
		},
		{
			name: "pair signed by another CA is replaced",
			req:  base,
			prepare: func(t *testing.T, certFile, keyFile string) {
				if _, err := otherCA.EnsurePair(certFile+".x", keyFile+".x", base); err != nil {
					t.Fatal(err)
				}
				mustRename(t, certFile+".x", certFile)
				mustRename(t, keyFile+".x", keyFile)
			},
		},
		{
			name:    "missing key is reissued",
			req:     base,
			prepare: func(t *testing.T, _, keyFile string) { mustRemove(t, keyFile) },
		},
		{
			name:    "missing cert is reissued",
			req:     base,
			prepare: func(t *testing.T, certFile, _ string) { mustRemove(t, certFile) },
		},
		{
			name: "pair expiring within a day is reissued",
			req:  base,
			prepare: func(t *testing.T, certFile, keyFile string) {
				short := base
				short.Duration = time.Hour
				c, k, err := ca.Issue(short)
				if err != nil {
					t.Fatal(err)
				}
				mustWrite(t, certFile, c)
				mustWrite(t, keyFile, k)
			},
		},
		{
			name: "mismatched key is reissued",
			req:  base,
			prepare: func(t *testing.T, _, keyFile string) {
				_, k, err := ca.Issue(base)
				if err != nil {
					t.Fatal(err)
				}
				mustWrite(t, keyFile, k)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			certFile, keyFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
			first, err := ca.EnsurePair(certFile, keyFile, base)
			if err != nil {
				t.Fatal(err)
			}
			if m := mode(t, keyFile); m != 0o600 {
				t.Errorf("key mode %o, want 600", m)
			}
			if tc.prepare != nil {
				tc.prepare(t, certFile, keyFile)
			}
			got, err := ca.EnsurePair(certFile, keyFile, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			reused := bytes.Equal(got.Certificate[0], first.Certificate[0])
			if reused != tc.reuse {
				t.Fatalf("reused = %v, want %v", reused, tc.reuse)
			}
			if !ca.covers(got.Leaf, tc.req, time.Now()) {
				t.Fatal("returned pair does not cover the request")
			}
			// What is on disk is what was returned.
			certPEM, _ := os.ReadFile(certFile)
			keyPEM, _ := os.ReadFile(keyFile)
			disk, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(disk.Certificate[0], got.Certificate[0]) {
				t.Fatal("file content differs from returned pair")
			}
			if m := mode(t, keyFile); m != 0o600 {
				t.Errorf("key mode %o, want 600", m)
			}
		})
	}
}

func withDNS(r Request, name string) Request {
	r.DNSNames = append(slices.Clone(r.DNSNames), name)
	return r
}

func withOrg(r Request, org string) Request {
	r.Organization = append(slices.Clone(r.Organization), org)
	return r
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	ca := mustCA(t)
	certPEM, keyPEM, err := ca.Issue(Request{CommonName: "admin", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	good := Kubeconfig{Server: "https://127.0.0.1:6443", ClusterName: "trustplane", UserName: "admin", CAPEM: ca.CertPEM, CertPEM: certPEM, KeyPEM: keyPEM}

	tests := []struct {
		name    string
		kc      Kubeconfig
		wantErr bool
	}{
		{name: "complete kubeconfig loads", kc: good},
		{name: "missing server is rejected", kc: func() Kubeconfig { k := good; k.Server = ""; return k }(), wantErr: true},
		{name: "missing key is rejected", kc: func() Kubeconfig { k := good; k.KeyPEM = nil; return k }(), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "admin.kubeconfig")
			err := WriteKubeconfig(path, tc.kc)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidKubeconfig) {
					t.Fatalf("got %v, want ErrInvalidKubeconfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m := mode(t, path); m != 0o600 {
				t.Errorf("mode %o, want 600", m)
			}
			loaded, err := clientcmd.LoadFromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if loaded.CurrentContext != "trustplane" || len(loaded.Contexts) != 1 || len(loaded.Clusters) != 1 || len(loaded.AuthInfos) != 1 {
				t.Fatalf("unexpected kubeconfig shape: %+v", loaded)
			}
			rc, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				t.Fatal(err)
			}
			if rc.Host != good.Server {
				t.Errorf("Host = %q", rc.Host)
			}
			if !bytes.Equal(rc.TLSClientConfig.CAData, ca.CertPEM) ||
				!bytes.Equal(rc.TLSClientConfig.CertData, certPEM) ||
				!bytes.Equal(rc.TLSClientConfig.KeyData, keyPEM) {
				t.Error("rest.Config does not carry the certificate data")
			}
		})
	}
}

func TestCAIDIdentifiesTheCertificate(t *testing.T) {
	a, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.ID()) != 64 || a.ID() == b.ID() {
		t.Fatalf("IDs %q and %q: want distinct 64-hex-digit IDs for distinct CAs", a.ID(), b.ID())
	}
}
