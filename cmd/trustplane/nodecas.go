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

	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/api/nodecas"
	"github.com/trustplane/trustplane/certs"
)

// nodeTrustFile keeps the node CAs a node trusted last, in its data
// directory (api/nodecas TrustFile).
const nodeTrustFile = "node-trust.pem"

// nodeCAsAtStart are the node CAs a node starts trusting: those it trusted
// last, when it has them (the replicated set is the truth once seeded),
// else the CA directory's node CA, which seeds the set.
func nodeCAsAtStart(log *slog.Logger, nodeCA *certs.CA, caDir, dataDir string) ([]*x509.Certificate, uint64, error) {
	roots, rev, err := nodecas.LoadTrust(filepath.Join(dataDir, nodeTrustFile))
	if err != nil || roots == nil {
		return []*x509.Certificate{nodeCA.Cert}, 0, err
	}
	if !slices.ContainsFunc(roots, nodeCA.Cert.Equal) {
		log.Warn("the CA directory's node CA is no longer trusted by the cluster; nodes that join with it cannot talk to the others: put the active node CA in it (trustplane rotate node-ca)",
			"file", filepath.Join(caDir, certs.NodeCACertFile), "trust-file", filepath.Join(dataDir, nodeTrustFile))
	}
	return roots, rev, nil
}

// nodeCertAtStart is the certificate a node starts with: the one in its
// data directory when a trusted node CA issued it for r, else a new one
// from the CA directory's node CA, if that is trusted.
func nodeCertAtStart(nodeCA *certs.CA, roots []*x509.Certificate, certFile, keyFile string, r certs.Request) (tls.Certificate, error) {
	if pair, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil && pair.Leaf != nil {
		for _, root := range roots {
			if (&certs.CA{Cert: root}).Covers(pair.Leaf, r) {
				return pair, nil
			}
		}
	}
	if !slices.ContainsFunc(roots, nodeCA.Cert.Equal) {
		return tls.Certificate{}, fmt.Errorf("node certificate: %s is not issued by a node CA the cluster trusts, and the CA directory's node CA is no longer trusted: put the active node CA in the CA directory", certFile)
	}
	return nodeCA.EnsurePair(certFile, keyFile, r)
}

// liveClientCAs is the API's client CA pool of the moment: the cluster CA,
// the client signers' CAs and every trusted node CA, rebuilt when the node
// CAs change (api.Config.ClientCAs).
type liveClientCAs struct {
	base  *x509.CertPool
	nodes *certs.NodeVerifier
	cur   atomic.Pointer[x509.CertPool]
}

func newLiveClientCAs(base *x509.CertPool, nodes *certs.NodeVerifier) *liveClientCAs {
	l := &liveClientCAs{base: base, nodes: nodes}
	l.rebuild()
	return l
}

func (l *liveClientCAs) rebuild() {
	p := l.base.Clone()
	for _, r := range l.nodes.Roots() {
		p.AddCert(r)
	}
	l.cur.Store(p)
}

func (l *liveClientCAs) pool() *x509.CertPool { return l.cur.Load() }

// signerCACerts are the CA certificates of every built-in signer.
func signerCACerts(s controllers.Signers) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, f := range []controllers.SignerFiles{s.KubeAPIServerClient, s.KubeAPIServerClientKubelet, s.KubeletServing} {
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

// setupNodeCAs builds the replicated node CAs (api/nodecas): the node's
// trust and certificate follow them live.
func setupNodeCAs(w *wiring, nodes *certs.NodeVerifier, cert *certs.NodeCert, req certs.Request, trustRev uint64, onTrust func(), forbidden []*x509.Certificate) *nodecas.Store {
	s := nodecas.New(nodecas.Config{
		Backend: w.back, AtRest: w.reg.InternalAtRest(),
		Verifier: nodes, Cert: cert, Request: req,
		CertFile: filepath.Join(w.pki, "node.crt"), KeyFile: filepath.Join(w.pki, "node.key"),
		TrustFile: filepath.Join(w.opts.dataDir, nodeTrustFile), TrustRevision: trustRev,
		OnTrust:    onTrust,
		Reconnect:  w.node.Reconnect,
		Members:    membership{node: w.node}.appliedIndexes,
		Presenting: membership{node: w.node}.facts(nodecas.Fact),
		Forbidden:  func() []*x509.Certificate { return forbidden },
		CaughtUp: func() bool {
			return w.node.CheckCaughtUp() == nil
		},
		Logger: w.log.With("component", "node-cas"),
	})
	w.fsm.Subscribe(s)
	return s
}

// seedNodeCAs is the leader task that seeds the replicated node CAs with
// the CA directory's.
func seedNodeCAs(s *nodecas.Store, ca *certs.CA) leaderTask {
	return func(ctx context.Context) error { return s.Seed(ctx, ca) }
}
