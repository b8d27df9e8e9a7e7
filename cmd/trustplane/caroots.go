package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/trustplane/trustplane/api/caroots"
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

// liveClientCAs is the API's client CA pool of the moment
// (api.Config.ClientCAs): kube's union of live CA bundles
// (dynamiccertificates) over the cluster CAs, the signers' own CAs and the
// node CAs (all rotated live) and this process's loopback CA. Each bundle
// tells the union's listener of its changes, which makes the pool once per
// change: kube's union parses its bundles on every VerifyOptions, which a
// handshake and every request with a client certificate would pay.
type liveClientCAs struct {
	union dynamiccertificates.CAContentProvider
	cur   atomic.Pointer[x509.CertPool]
}

func newLiveClientCAs(bundles ...dynamiccertificates.CAContentProvider) *liveClientCAs {
	l := &liveClientCAs{union: dynamiccertificates.NewUnionCAContentProvider(bundles...)}
	l.union.AddListener(l)
	l.Enqueue()
	return l
}

// Enqueue makes the pool again (dynamiccertificates.Listener).
func (l *liveClientCAs) Enqueue() {
	if opts, ok := l.union.VerifyOptions(); ok {
		l.cur.Store(opts.Roots)
	}
}

func (l *liveClientCAs) pool() *x509.CertPool { return l.cur.Load() }

// caRoot is what setupCARoot needs to build one kind's store.
type caRoot struct {
	kind              caroots.Kind
	trust             caroots.Trust
	cert              caroots.Cert
	req               certs.Request
	certFile, keyFile string
	trustFile         string
	trustRev          uint64
	onChange          func(cas []*certs.CA, active *certs.CA) error
	forbidden         func() []*x509.Certificate
	reconnect         func()
	retireAfter       time.Duration
}

// setupCARoot builds one kind's replicated CAs (api/caroots): the node's
// trust and certificate follow them live.
func setupCARoot(w *wiring, r caRoot) *caroots.Store {
	m := membership{node: w.node}
	cfg := caroots.Config{
		Kind: r.kind, Backend: w.back, AtRest: w.reg.InternalAtRest(),
		Verifier: r.trust, Cert: r.cert, Request: r.req, RetireAfter: r.retireAfter,
		CertFile: r.certFile, KeyFile: r.keyFile,
		TrustFile: r.trustFile, TrustRevision: r.trustRev,
		OnChange:  r.onChange,
		Reconnect: r.reconnect,
		Members:   m.appliedIndexes,
		Unable:    m.lacking(r.kind.Feature),
		Forbidden: r.forbidden,
		CaughtUp: func() bool {
			return w.node.CheckCaughtUp() == nil
		},
		Logger: w.log.With("component", r.kind.Root),
	}
	if r.kind.Fact != "" {
		// The voters report the CA of the certificate they present;
		// finish waits for them.
		cfg.Presenting = m.facts(r.kind.Fact)
	}
	s := caroots.New(cfg)
	w.fsm.Subscribe(s)
	w.caStores = append(w.caStores, s)
	return s
}

// seedCARoot is the leader task that seeds one kind's replicated CAs with
// the CA directory's.
func seedCARoot(s *caroots.Store, ca *certs.CA) leaderTask {
	return func(ctx context.Context) error { return s.Seed(ctx, ca) }
}
