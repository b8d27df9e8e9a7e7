package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trustplane/trustplane/api/caroots"
	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/internal/memlog"
)

// CCA-2 (docs/REDTEAM-cluster-ca.md): a node whose disk fails for a moment
// while it applies promote must write the default signers' CA files once
// the disk is back, not at the next rotation: until then its CSR signers
// sign with the CA being retired (or with a key that does not match the
// certificate beside it), and after finish nothing they sign authenticates.
func TestRedteamClusterCAFollowerRetriesAfterAFailedWrite(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	seed, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	roots := certs.NewRoots("cluster-cas", seed.Cert)
	req := certs.Request{CommonName: "trustplane-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
	certFile, keyFile := filepath.Join(pki, "apiserver.crt"), filepath.Join(pki, "apiserver.key")
	pair, err := seed.EnsurePair(certFile, keyFile, req)
	if err != nil {
		t.Fatal(err)
	}
	serving := certs.NewNodeCert(pair)
	follow := newCAFollower(&wiring{opts: &options{dataDir: dir}, log: slog.Default(), pki: pki}, roots, nil)
	log := memlog.New()
	s := caroots.New(caroots.Config{
		Kind: caroots.ClusterKind, Backend: log, AtRest: storage.AtRest{}, Verifier: roots, Cert: serving, Request: req,
		CertFile: certFile, KeyFile: keyFile, TrustFile: filepath.Join(dir, clusterTrustFile),
		OnChange: follow.onChange,
		Members: func(context.Context) (map[string]uint64, error) {
			return map[string]uint64{"n1": log.AppliedIndex()}, nil
		},
	})
	t.Cleanup(log.FSM.Subscribe(s))
	if err := s.Seed(ctx, seed); err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	signer := filepath.Join(pki, clusterSignerCert)
	// signs is the id of the CA the signer files hold ("" when they do
	// not hold a CA and its key).
	signs := func() string {
		b, _ := os.ReadFile(signer)
		k, _ := os.ReadFile(filepath.Join(pki, clusterSignerKey))
		got, err := certs.ParseCA(append(b, k...))
		if err != nil {
			return ""
		}
		return certs.CertID(got.Cert)
	}
	eventually(t, 10*time.Second, "the seed in the signer files", func() bool { return signs() == certs.CertID(seed.Cert) })

	// The disk fails for the signer's certificate file.
	if err := os.Remove(signer); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(signer, "busy"), 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := rotation.Run(ctx, s.Root(), rotation.StepStart, rotation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := st.Keys[0].ID
	eventually(t, 10*time.Second, "promote", func() bool {
		_, err := rotation.Run(ctx, s.Root(), rotation.StepPromote, rotation.Options{})
		return err == nil
	})
	eventually(t, 10*time.Second, "the serving certificate of the new CA", func() bool {
		for _, r := range roots.Roots() {
			if certs.CertID(r) == next && serving.Get().Leaf.CheckSignatureFrom(r) == nil {
				return true
			}
		}
		return false
	})
	// The disk is back.
	if err := os.RemoveAll(signer); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the new CA in the signer files once the disk is back", func() bool { return signs() == next })
}

// eventually waits up to d for cond.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CCA-3: start of the cluster CA refuses a CA a signer was given its own
// files for: a kubelet-serving CA made the cluster CA would let its
// approvers issue serving certificates every client of the API trusts.
// The forbidden list holds those own CAs and never the default signers'
// files, which hold the active cluster CA.
func TestRedteamClusterCAForbidsOwnSignerCAs(t *testing.T) {
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	own, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	active, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := own.WriteFiles(filepath.Join(dir, "serving-ca.crt"), filepath.Join(dir, "serving-ca.key")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := active.WriteFiles(filepath.Join(pki, clusterSignerCert), filepath.Join(pki, clusterSignerKey)); err != nil {
		t.Fatal(err)
	}
	s := signingFlags{kubeletServingCert: filepath.Join(dir, "serving-ca.crt"), kubeletServingKey: filepath.Join(dir, "serving-ca.key")}
	scs, err := signerCAsAtStart(slog.Default(), &s, dir, pki)
	if err != nil {
		t.Fatal(err)
	}
	got := signerRoots(scs)()
	if len(got) != 1 || !got[0].Equal(own.Cert) {
		t.Fatalf("own signer CAs: %d certificates, want the kubelet-serving CA alone", len(got))
	}
}

// CCA-4: a node restarted after a rotation whose CA directory still holds
// the CA rotated out issues its admin kubeconfig, until it has followed
// the set, with the CA it followed last (the default signers' files), not
// with the CA directory's, which no node trusts any more.
func TestRedteamClusterCAAdminKubeconfigAtStart(t *testing.T) {
	pki := t.TempDir()
	retired, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	last, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := last.WriteFiles(filepath.Join(pki, clusterSignerCert), filepath.Join(pki, clusterSignerKey)); err != nil {
		t.Fatal(err)
	}
	if got := activeAtStart(pki, certs.NewRoots("cluster-cas", last.Cert), retired); !got.Cert.Equal(last.Cert) {
		t.Fatal("the admin kubeconfig at start is issued by the CA directory's retired CA")
	}
	// A signer file the node does not trust is not used.
	if got := activeAtStart(pki, certs.NewRoots("cluster-cas", retired.Cert), retired); !got.Cert.Equal(retired.Cert) {
		t.Fatal("an untrusted signer file issues the admin kubeconfig")
	}
}
