package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/trustplane/trustplane/api/caroots"
	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/certs"
)

// nodeTrustFile and clusterTrustFile keep the node CAs and the cluster CAs
// a node trusted last, in its data directory (api/caroots TrustFile).
const (
	nodeTrustFile    = "node-trust.pem"
	clusterTrustFile = "cluster-trust.pem"
)

// casAtStart are the CAs of kind k a node starts trusting: those it
// trusted last (trustFile in dataDir), when it has them (the replicated
// set is the truth once seeded), else seed, the CA directory's CA, which
// seeds the set.
func casAtStart(log *slog.Logger, k caroots.Kind, seed *certs.CA, seedFile, trustFile string) ([]*x509.Certificate, uint64, error) {
	roots, rev, err := caroots.LoadTrust(trustFile)
	if err != nil || roots == nil {
		return []*x509.Certificate{seed.Cert}, 0, err
	}
	if !slices.ContainsFunc(roots, seed.Cert.Equal) {
		log.Warn("the CA directory's "+k.Noun+" is no longer trusted by the cluster; nodes that join with it cannot work with the others: put the active "+k.Noun+" in it (trustplane rotate "+k.Root+")",
			"file", seedFile, "trust-file", trustFile)
	}
	return roots, rev, nil
}

// certAtStart is the certificate a node starts presenting for kind k: the
// one in its data directory (with the chain stored with it) when a
// trusted CA issued it for r, else a new one from seed, the CA
// directory's CA, if that is trusted. Once caught up, api/caroots brings
// it and its chain in step with the record.
func certAtStart(k caroots.Kind, seed *certs.CA, roots []*x509.Certificate, certFile, keyFile string, r certs.Request) (tls.Certificate, error) {
	if pair, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil && pair.Leaf != nil {
		for _, root := range roots {
			if (&certs.CA{Cert: root}).Covers(pair.Leaf, r) {
				return pair, nil
			}
		}
	}
	if !slices.ContainsFunc(roots, seed.Cert.Equal) {
		return tls.Certificate{}, fmt.Errorf("%s is not issued by a %s the cluster trusts, and the CA directory's %s is no longer trusted: put the active %s in the CA directory", certFile, k.Noun, k.Noun, k.Noun)
	}
	return seed.EnsurePair(certFile, keyFile, r)
}

// liveClientCAs is the API's client CA pool of the moment, a union of
// sources, rebuilt when one of them changes (api.Config.ClientCAs): the
// signers' own CAs (fixed), the cluster CAs and the node CAs (both
// rotated live) and this process's loopback CA.
type liveClientCAs struct {
	sources []func() []*x509.Certificate
	cur     atomic.Pointer[x509.CertPool]
}

func newLiveClientCAs(sources ...func() []*x509.Certificate) *liveClientCAs {
	l := &liveClientCAs{sources: sources}
	l.rebuild()
	return l
}

func (l *liveClientCAs) rebuild() {
	p := x509.NewCertPool()
	for _, src := range l.sources {
		for _, c := range src() {
			p.AddCert(c)
		}
	}
	l.cur.Store(p)
}

func (l *liveClientCAs) pool() *x509.CertPool { return l.cur.Load() }

// signerCACerts are the CA certificates of every built-in signer.
func signerCACerts(s controllers.Signers) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, f := range []controllers.SignerFiles{s.KubeAPIServerClient, s.KubeAPIServerClientKubelet, s.KubeletServing} {
		if f.CertFile == "" {
			continue
		}
		b, err := os.ReadFile(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("signer CA: %w", err)
		}
		for {
			var block *pem.Block
			block, b = pem.Decode(b)
			if block == nil {
				break
			}
			if c, err := x509.ParseCertificate(block.Bytes); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// ownSignerCACerts are the CA certificates of the built-in signers given
// files of their own (--cluster-signing-*), not the default ones in pki
// that follow the cluster CA: a cluster CA must be none of them, or
// whoever may approve for that signer obtains what the cluster CA grants
// (a kubelet-serving approver, a serving certificate every client of the
// API trusts).
func ownSignerCACerts(s controllers.Signers, pki string) ([]*x509.Certificate, error) {
	var own controllers.Signers
	def := filepath.Join(pki, clusterSignerCert)
	for _, p := range []struct{ from, to *controllers.SignerFiles }{
		{&s.KubeAPIServerClient, &own.KubeAPIServerClient},
		{&s.KubeAPIServerClientKubelet, &own.KubeAPIServerClientKubelet},
		{&s.KubeletServing, &own.KubeletServing},
	} {
		if p.from.CertFile != def {
			*p.to = *p.from
		}
	}
	return signerCACerts(own)
}

// caRoot is what setupCARoot needs to build one kind's store.
type caRoot struct {
	kind              caroots.Kind
	trust             caroots.Trust
	cert              caroots.Cert
	req               certs.Request
	certFile, keyFile string
	trustFile         string
	trustRev          uint64
	onTrust           func()
	onChange          func(cas []*certs.CA, active *certs.CA) error
	forbidden         func() []*x509.Certificate
	reconnect         func()
}

// setupCARoot builds one kind's replicated CAs (api/caroots): the node's
// trust and certificate follow them live.
func setupCARoot(w *wiring, r caRoot) *caroots.Store {
	m := membership{node: w.node}
	s := caroots.New(caroots.Config{
		Kind: r.kind, Backend: w.back, AtRest: w.reg.InternalAtRest(),
		Verifier: r.trust, Cert: r.cert, Request: r.req,
		CertFile: r.certFile, KeyFile: r.keyFile,
		TrustFile: r.trustFile, TrustRevision: r.trustRev,
		OnTrust:    r.onTrust,
		OnChange:   r.onChange,
		Reconnect:  r.reconnect,
		Members:    m.appliedIndexes,
		Presenting: m.facts(r.kind.Fact),
		Unable:     m.lacking(r.kind.Feature),
		Forbidden:  r.forbidden,
		CaughtUp: func() bool {
			return w.node.CheckCaughtUp() == nil
		},
		Logger: w.log.With("component", r.kind.Root),
	})
	w.fsm.Subscribe(s)
	return s
}

// seedCARoot is the leader task that seeds one kind's replicated CAs with
// the CA directory's.
func seedCARoot(s *caroots.Store, ca *certs.CA) leaderTask {
	return func(ctx context.Context) error { return s.Seed(ctx, ca) }
}
