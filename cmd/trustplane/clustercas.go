package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/certs"
)

// The files of the cluster CA that signs for the built-in signers left at
// their default (no --cluster-signing-* flag), in <data-dir>/pki: each
// node writes the active cluster CA there as it applies a rotation step,
// because kube's signers read their CA from files (and reload them).
const (
	clusterSignerCert = "cluster-signer.crt"
	clusterSignerKey  = "cluster-signer.key"
)

// clusterIDFile keeps the cluster's id in a node's data directory (and,
// optionally, in the CA directory for nodes that join later).
const clusterIDFile = "cluster-id"

// clusterIDAtStart is the id gossip and backups know the cluster by. It
// is fixed at a node's first start and kept in its data directory, so
// that it survives a rotation of the cluster CA it was first derived
// from: <ca-dir>/cluster-id when the operator put one there (a node that
// joins after a rotation), else the CA directory's CA's id.
func clusterIDAtStart(dataDir, caDir string, ca *certs.CA) (string, error) {
	own := filepath.Join(dataDir, clusterIDFile)
	for _, p := range []string{own, filepath.Join(caDir, clusterIDFile)} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		id := strings.TrimSpace(string(b))
		if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
			return "", fmt.Errorf("%s: not a cluster id (64 hex digits)", p)
		}
		if p != own {
			if err := certs.WriteFileAtomic(own, []byte(id+"\n"), 0o644); err != nil {
				return "", err
			}
		}
		return id, nil
	}
	id := ca.ID()
	return id, certs.WriteFileAtomic(own, []byte(id+"\n"), 0o644)
}

// clusterSignerAtStart makes sure the default signers' CA files exist: a
// node keeps the last active cluster CA there; a new node starts with the
// CA directory's.
func clusterSignerAtStart(pki string, seed *certs.CA) error {
	if _, err := os.Stat(filepath.Join(pki, clusterSignerCert)); err == nil {
		if _, err := os.Stat(filepath.Join(pki, clusterSignerKey)); err == nil {
			return nil
		}
	}
	return seed.WriteFiles(filepath.Join(pki, clusterSignerCert), filepath.Join(pki, clusterSignerKey))
}

// activeAtStart is the cluster CA a node issues its admin kubeconfig with
// before it has followed the replicated set (api/caroots OnChange): the
// one it last followed, kept in the default signers' files, when a CA it
// trusts; else seed, the CA directory's. After a rotation the CA
// directory often still holds the CA rotated out, whose certificate no
// node accepts.
func activeAtStart(pki string, roots *certs.Roots, seed *certs.CA) *certs.CA {
	crt, err := os.ReadFile(filepath.Join(pki, clusterSignerCert))
	if err != nil {
		return seed
	}
	key, err := os.ReadFile(filepath.Join(pki, clusterSignerKey))
	if err != nil {
		return seed
	}
	last, err := certs.ParseCA(append(crt, key...))
	if err != nil || !slices.ContainsFunc(roots.Roots(), last.Cert.Equal) {
		return seed
	}
	return last
}

// caFollower does what a node must besides trusting the CAs and
// presenting a certificate of the active cluster CA (api/caroots) when a
// step of a CA's rotation is applied: the signers sign with their active
// CA, the admin kubeconfig holds a certificate of the active cluster CA
// and trusts every cluster CA, and the controllers start a new term with
// the new roots (kube-root-ca.crt, token Secrets' ca.crt, the
// ClusterTrustBundles).
type caFollower struct {
	w          *wiring
	roots      *certs.Roots // the cluster CAs
	signers    []*signerCA  // the signers with CA files of their own
	server     string       // the node's API URL, once it serves
	ready      atomic.Bool  // the admin kubeconfig is written once the node is ready
	mu         sync.Mutex   // serialises writes of the kubeconfig
	active     atomic.Pointer[certs.CA]
	controller atomic.Pointer[controllers.Manager]
	termPEM    atomic.Pointer[[]byte] // the roots the controllers' term was last restarted for
}

func newCAFollower(w *wiring, roots *certs.Roots, signers []*signerCA) *caFollower {
	f := &caFollower{w: w, roots: roots, signers: signers}
	pem := f.published()
	f.termPEM.Store(&pem)
	return f
}

// published is every bundle the controllers publish, as one value.
func (f *caFollower) published() []byte {
	out := f.roots.PEM()
	for _, sc := range f.signers {
		out = append(out, sc.roots.PEM()...)
	}
	return out
}

// restartControllers starts a new term of the controllers when the
// bundles they publish changed since the last: the first record a node
// applies after a restart is usually the one its trust file held.
func (f *caFollower) restartControllers(why string) {
	pem := f.published()
	if last := f.termPEM.Swap(&pem); last != nil && string(*last) == string(pem) {
		return
	}
	if m := f.controller.Load(); m != nil {
		m.Restart(why)
	}
}

// onSignerChange writes signer's active CA where kube's signer reads it;
// a failed write is retried for the same record (api/caroots).
func (f *caFollower) onSignerChange(signer string) func([]*certs.CA, *certs.CA) error {
	return func(_ []*certs.CA, active *certs.CA) error {
		files := signerCAFiles(f.w.pki, signer)
		if err := active.WriteFiles(files.CertFile, files.KeyFile); err != nil {
			return fmt.Errorf("the %s signer's CA files: %w", signer, err)
		}
		f.restartControllers("the " + signer + " signer CAs changed")
		return nil
	}
}

func (f *caFollower) onChange(_ []*certs.CA, active *certs.CA) error {
	f.active.Store(active)
	// A failed write returns before the term restarts: api/caroots runs
	// onChange again for the same record, which writes both files again
	// (the key is written first, so a failure between them leaves a pair
	// that does not match until then).
	if err := active.WriteFiles(filepath.Join(f.w.pki, clusterSignerCert), filepath.Join(f.w.pki, clusterSignerKey)); err != nil {
		return fmt.Errorf("the default signers' CA files: %w", err)
	}
	if f.ready.Load() {
		if err := f.writeKubeconfig(); err != nil {
			return fmt.Errorf("writing the admin kubeconfig: %w", err)
		}
	}
	f.restartControllers("the cluster CAs changed")
	return nil
}

// writeKubeconfig writes <data-dir>/admin.kubeconfig: a system:masters
// certificate of the active cluster CA, trusting every cluster CA.
func (f *caFollower) writeKubeconfig() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	active := f.active.Load()
	cert, key, err := active.Issue(certs.Request{CommonName: "trustplane-admin", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	return certs.WriteKubeconfig(filepath.Join(f.w.opts.dataDir, "admin.kubeconfig"), certs.Kubeconfig{
		Server: f.server, ClusterName: "trustplane", UserName: "trustplane-admin",
		CAPEM: f.roots.PEM(), CertPEM: cert, KeyPEM: key,
	})
}

// loopback is this process's credentials for its own API, as
// kube-apiserver's loopback client: a client certificate of a CA that
// exists in this process only (certs.NewLoopbackCA), trusted by this
// node's API alone, so it outlives every rotation of the cluster CA; and
// the server verified against the cluster CAs of the moment.
type loopback struct {
	ca    *certs.CA
	roots *certs.Roots
}

func newLoopback(roots *certs.Roots) (*loopback, error) {
	ca, err := certs.NewLoopbackCA()
	if err != nil {
		return nil, err
	}
	return &loopback{ca: ca, roots: roots}, nil
}

// issued reports whether anchor is the loopback CA: the chain is one of
// the node's own components' (api.Config.Components).
func (l *loopback) issued(anchor *x509.Certificate) bool { return anchor.Equal(l.ca.Cert) }

// bundle is the loopback CA, for the API's client CAs.
func (l *loopback) bundle() dynamiccertificates.CAContentProvider {
	return certs.NewRoots("loopback", l.ca.Cert)
}

// config is a client of url as user in groups, with a transport of its
// own.
func (l *loopback) config(url, user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := l.ca.Issue(certs.Request{CommonName: user, Organization: groups, Client: true})
	if err != nil {
		return nil, fmt.Errorf("loopback certificate for %s: %w", user, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loopback certificate for %s: %w", user, err)
	}
	tr := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig: &tls.Config{
			Certificates:       []tls.Certificate{pair},
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: true, // verified by VerifyConnection against the live roots, never skipped
			VerifyConnection:   certs.VerifyServer(l.roots.Pool),
		},
		TLSHandshakeTimeout: 10 * time.Second,
	})
	return &rest.Config{Host: url, Transport: tr, QPS: 200, Burst: 400, UserAgent: "trustplane/" + user}, nil
}

// Issue makes a client certificate of the loopback CA (the controllers'
// controllers.Issuer).
func (l *loopback) Issue(r certs.Request) ([]byte, []byte, error) { return l.ca.Issue(r) }
