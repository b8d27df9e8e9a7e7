package caroots

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/internal/memlog"
)

// verifies reports whether the certificate c presents, with its chain,
// verifies as a server for 127.0.0.1 under ca alone.
func verifies(t *testing.T, c Cert, ca *x509.Certificate) bool {
	t.Helper()
	cur := c.Get()
	inter := x509.NewCertPool()
	for _, der := range cur.Certificate[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(ic)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := cur.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// TestClusterCAChain: the serving certificate of a cluster CA rotation
// verifies under every CA of the record at every phase (the active CA
// cross-signed by the others), and only under the remaining one after
// finish; OnChange follows the active CA.
func TestClusterCAChain(t *testing.T) {
	ctx := context.Background()
	seed, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := memlog.New()
	roots := certs.NewRoots("test", seed.Cert)
	req := certs.Request{CommonName: "trustplane-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
	pair, err := seed.EnsurePair(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key"), req)
	if err != nil {
		t.Fatal(err)
	}
	serving := certs.NewNodeCert(pair)
	var active string
	s := New(Config{
		Kind: ClusterKind, Backend: log, AtRest: storage.AtRest{}, Verifier: roots, Cert: serving, Request: req,
		CertFile: filepath.Join(dir, "apiserver.crt"), KeyFile: filepath.Join(dir, "apiserver.key"), TrustFile: filepath.Join(dir, "trust.pem"),
		OnChange: func(_ []*certs.CA, a *certs.CA) error { active = certs.CertID(a.Cert); return nil },
		Members: func(context.Context) (map[string]uint64, error) {
			return map[string]uint64{"n1": log.AppliedIndex()}, nil
		},
		Presenting: func(context.Context) (map[string]string, error) {
			return Facts(ClusterKind, roots, serving), nil
		},
		Now: func() time.Time { return time.Unix(1000, 0) },
	})
	t.Cleanup(log.FSM.Subscribe(s))
	if err := s.Seed(ctx, seed); err != nil {
		t.Fatal(err)
	}
	sync := func() {
		t.Helper()
		if err := s.syncTrust(); err != nil {
			t.Fatal(err)
		}
		if err := s.ensureCert(); err != nil {
			t.Fatal(err)
		}
	}
	step := func(st rotation.Step) *rotation.Status {
		t.Helper()
		out, err := rotation.Run(ctx, s.Root(), st, rotation.Options{})
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		sync()
		return out
	}
	sync()
	if active != certs.CertID(seed.Cert) || !verifies(t, serving, seed.Cert) {
		t.Fatalf("at the seed: OnChange saw %s", active)
	}

	st := step(rotation.StepStart)
	next, err := certs.ParseCA(mustKey(t, s, st.Keys[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	// start: still the seed's leaf, also verifiable under the pending CA.
	if !seed.Issued(serving.Get().Leaf) || !verifies(t, serving, seed.Cert) || !verifies(t, serving, next.Cert) {
		t.Fatal("after start the serving certificate is not the seed's, verifiable under both CAs")
	}
	if len(roots.Roots()) != 2 {
		t.Fatalf("after start the node trusts %d cluster CAs", len(roots.Roots()))
	}

	// promote: the new CA's leaf, verifiable under the old CA too; the
	// chain is on disk, for a restart.
	step(rotation.StepPromote)
	if !next.Issued(serving.Get().Leaf) || !verifies(t, serving, seed.Cert) || !verifies(t, serving, next.Cert) || active != certs.CertID(next.Cert) {
		t.Fatalf("after promote: issued by the new CA %v, OnChange saw %s", next.Issued(serving.Get().Leaf), active)
	}
	if onDisk, err := tls.LoadX509KeyPair(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")); err != nil || len(onDisk.Certificate) != 2 {
		t.Fatalf("after promote the file holds %d certificates: %v", len(onDisk.Certificate), err)
	}

	// finish: the new CA alone.
	step(rotation.StepFinish)
	if verifies(t, serving, seed.Cert) || !verifies(t, serving, next.Cert) || len(serving.Get().Certificate) != 1 {
		t.Fatal("after finish the serving certificate still verifies under the old CA")
	}
	if got := roots.Roots(); len(got) != 1 || !got[0].Equal(next.Cert) {
		t.Fatalf("after finish the node trusts %d cluster CAs", len(got))
	}
}

// mustKey is the PEM bundle of the CA id in s's record.
func mustKey(t *testing.T, s *Store, id string) []byte {
	t.Helper()
	_, cas, _, err := s.read()
	if err != nil || cas[id] == nil {
		t.Fatalf("CA %s not in the record: %v", id, err)
	}
	b, err := cas[id].PEM()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A signer's CAs present nothing: the store issues no certificate, and
// finish waits until the certificates the retiring CA issued may have
// expired (RetireAfter after promote), unless forced.
func TestSignerCAFinishWaitsForIssuedCertificates(t *testing.T) {
	ctx := context.Background()
	seed, err := certs.NewSignerCA("kube-apiserver-client")
	if err != nil {
		t.Fatal(err)
	}
	log := memlog.New()
	roots := certs.NewRoots("test", seed.Cert)
	now := time.Unix(1000, 0)
	var active string
	s := New(Config{
		Kind: SignerKind("kubernetes.io/kube-apiserver-client"), Backend: log, AtRest: storage.AtRest{}, Verifier: roots,
		TrustFile: filepath.Join(t.TempDir(), "trust.pem"), RetireAfter: time.Hour,
		OnChange: func(_ []*certs.CA, a *certs.CA) error { active = certs.CertID(a.Cert); return nil },
		Members: func(context.Context) (map[string]uint64, error) {
			return map[string]uint64{"n1": log.AppliedIndex()}, nil
		},
		Now: func() time.Time { return now },
	})
	t.Cleanup(log.FSM.Subscribe(s))
	if err := s.Seed(ctx, seed); err != nil {
		t.Fatal(err)
	}
	step := func(st rotation.Step, o rotation.Options) (*rotation.Status, error) {
		t.Helper()
		out, err := rotation.Run(ctx, s.Root(), st, o)
		if err == nil {
			if err := s.syncTrust(); err != nil {
				t.Fatal(err)
			}
			if err := s.ensureCert(); err != nil {
				t.Fatal(err)
			}
		}
		return out, err
	}
	if _, err := step(rotation.StepStart, rotation.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := step(rotation.StepPromote, rotation.Options{}); err != nil {
		t.Fatal(err)
	}
	if active == certs.CertID(seed.Cert) || active == "" {
		t.Fatalf("after promote OnChange saw %q", active)
	}
	st, err := step(rotation.StepStatus, rotation.Options{})
	if err != nil || !strings.Contains(st.Waiting, "may be valid until 1970-01-01T01:16:40Z") {
		t.Fatalf("status after promote: %+v %v", st, err)
	}
	if _, err := step(rotation.StepFinish, rotation.Options{}); !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("finish within the lifetime of the old CA's certificates: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := step(rotation.StepFinish, rotation.Options{}); err != nil {
		t.Fatalf("finish once they expired: %v", err)
	}
	if got := roots.Roots(); len(got) != 1 || got[0].Equal(seed.Cert) {
		t.Fatal("after finish the old signer CA is still trusted")
	}
}
