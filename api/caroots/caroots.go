package caroots

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trustplane/trustplane/api/keyrecord"
	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
)

// Kind is what makes one CA root differ from another.
type Kind struct {
	// Root is the root's name in the operator interface.
	Root string
	// Noun names one of its CAs in messages and logs.
	Noun string
	// Resource is the internal resource of its record. A restore into a
	// new cluster leaves it out (cluster/backup.go): the new cluster's CA
	// directory seeds its own.
	Resource string
	// Feature is what a build that follows these CAs live reports to its
	// peers (cluster.Config.Features): start and promote wait until every
	// voter does, since an older build trusts its CA directory's CA alone
	// and would refuse its peers' or clients' new certificates.
	Feature string
	// Fact is the key of Member.Facts under which a node reports the id of
	// the CA that issued the certificate it presents.
	Fact string
	// NewCA makes a CA when start is given none.
	NewCA func() (*certs.CA, error)
	// Chain: the node's certificate is verified by clients that may trust
	// only one CA of the record, so it is presented with the active CA
	// cross-signed by each other CA.
	Chain bool
}

// The kinds of CA rotated online.
var (
	NodeKind = Kind{
		Root: "node-ca", Noun: "node CA", Resource: cluster.NodeCAsResource,
		Feature: "node-ca-rotation", Fact: "node-ca", NewCA: certs.NewNodeCA,
	}
	ClusterKind = Kind{
		Root: "cluster-ca", Noun: "cluster CA", Resource: cluster.ClusterCAsResource,
		Feature: "cluster-ca-rotation", Fact: "cluster-ca", NewCA: certs.NewClusterCA, Chain: true,
	}
)

// SignerRootPrefix starts the root name of a built-in CSR signer's CA
// (SignerKind); the operator names the signer (`trustplane rotate
// signer-ca STEP --signer NAME`).
const SignerRootPrefix = "signer-ca-"

// SignerKind is the kind of the CA of the built-in CSR signer called
// signer (kubernetes.io/kube-apiserver-client, ...) when it has CA files
// of its own (--cluster-signing-*-file); a signer without them signs with
// the cluster CA and rotates with it. Its CAs sign for others and present
// nothing, so finish waits for the certificates the retiring CA issued
// to expire (Config.RetireAfter) instead.
func SignerKind(signer string) Kind {
	short := strings.TrimPrefix(signer, "kubernetes.io/")
	return Kind{
		Root: SignerRootPrefix + short, Noun: signer + " signer CA", Resource: cluster.SignerCAsResourcePrefix + short,
		Feature: "signer-ca-rotation", NewCA: func() (*certs.CA, error) { return certs.NewSignerCA(short) },
	}
}

// Sentinel errors.
var (
	// ErrBadRecord: the stored record cannot be opened or decoded. The
	// message names the record, never its bytes.
	ErrBadRecord = errors.New("caroots: the stored CAs are unreadable")
	// ErrConflict: the record changed between a step's read and write.
	ErrConflict = errors.New("caroots: the CAs changed meanwhile")
	// ErrNotFollowed: OnChange failed for a record; it runs again.
	ErrNotFollowed = errors.New("caroots: the node did not follow the CAs yet (retried)")
)

// Trust is a node's live trust in one kind's CAs.
type Trust interface {
	Roots() []*x509.Certificate
	SetRoots([]*x509.Certificate)
}

// Cert is the certificate a node presents, replaced live.
type Cert interface {
	Get() *tls.Certificate
	Set(tls.Certificate)
}

// Backend is what the store needs of the replicated state machine: its
// record's (keyrecord.Backend).
type Backend = keyrecord.Backend

// Config configures a Store.
type Config struct {
	Backend Backend
	// AtRest seals the record: the transformation of internal records
	// that hold secret material (storage.Storage.InternalAtRest).
	AtRest storage.AtRest
	// Kind is the kind of CA.
	Kind Kind
	// Verifier is the node's trust in the CAs, and Cert the certificate
	// it presents; both change live. A kind whose CAs only sign for
	// others (a CSR signer's) has no Cert: finish then waits for
	// RetireAfter instead of for the members' certificates.
	Verifier Trust
	Cert     Cert
	// RetireAfter is how long after promote a certificate the retiring
	// CA issued may still be valid (the signer's longest lifetime): finish
	// waits for it, unless forced. Zero: finish does not wait.
	RetireAfter time.Duration
	// Request is what the node's certificate must hold (its name, hosts).
	Request certs.Request
	// CertFile and KeyFile keep the node's certificate; TrustFile the CAs
	// it trusts (certificates only) and the record's revision they are
	// from.
	CertFile, KeyFile, TrustFile string
	// TrustRevision is the revision of the record TrustFile held when the
	// node started (LoadTrust). A record older than it is history the
	// node is replaying (a restart from an older snapshot): the node only
	// adds its CAs, saves nothing and issues itself nothing from it.
	TrustRevision uint64
	// OnChange runs, once the node is caught up, after it has applied a
	// new record and brought its certificate in step: cas are every CA of
	// the record, newest first, and active the one that issues. An error
	// (a file it could not write) makes it run again for the same record
	// at Run's next look, so that a moment of a failing disk does not
	// leave the node behind until the next step.
	OnChange func(cas []*certs.CA, active *certs.CA) error
	// Reconnect closes the node's pooled connections to its peers, after
	// its trust or its certificate changed, so that the next ones are made
	// with the new ones (cluster.Node.Reconnect).
	Reconnect func()
	// Members returns the members' applied indexes by name; Presenting the
	// voters' Fact by name ("" when a member did not say).
	Members    rotation.Applied
	Presenting func(ctx context.Context) (map[string]string, error)
	// Forbidden are the CAs a CA of this kind must never be: those of the
	// other kinds (for the node CA, the cluster CA and the signers' CAs).
	Forbidden func() []*x509.Certificate
	// Unable returns the members whose build does not report Feature.
	Unable func(ctx context.Context) ([]string, error)
	// CaughtUp reports whether the node has applied what its leader has
	// committed; nil: always.
	CaughtUp func() bool
	// Now is the clock that stamps phases; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Kind is the kind of CA s keeps.
func (s *Store) Kind() Kind { return s.cfg.Kind }

// Store keeps a node's trust and certificate following the replicated
// record of one kind, and is that kind's rotation root on the leader.
type Store struct {
	cfg  Config
	kick chan struct{}

	mu      sync.Mutex // serialises syncs
	applied uint64     // ModRevision of the record last trusted when caught up
	// floor is the newest record revision the node has trusted (from
	// TrustFile at start, then from every record applied when current).
	floor uint64
	// changed is the ModRevision of the record OnChange last ran for.
	changed uint64
	// widened is set while the node trusts CAs its record no longer holds
	// (syncTrust while catching up), so that it stops as soon as it has
	// caught up (OnIndex), not at Run's next look.
	widened atomic.Bool
}

// New returns a Store; Run keeps the certificate in step.
func New(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Store{cfg: cfg, kick: make(chan struct{}, 1), floor: cfg.TrustRevision}
}

// record is the stored set of CAs, newest first; each key is the
// CA's PEM bundle (certs.CA.PEM).
type record struct {
	Keys []rotation.Keyed `json:"keys"`
}

func (r *record) entries() []rotation.Entry { return rotation.EntriesOf(r.Keys) }

func (r *record) withEntries(es []rotation.Entry, added map[string][]byte) *record {
	return &record{Keys: rotation.WithEntries(r.Keys, es, added)}
}

// cas parses every CA of r, by id.
func (r *record) cas() (map[string]*certs.CA, error) {
	out := map[string]*certs.CA{}
	for _, k := range r.Keys {
		ca, err := certs.ParseCA(k.Key)
		if err != nil || certs.CertID(ca.Cert) != k.ID {
			return nil, ErrBadRecord
		}
		out[k.ID] = ca
	}
	return out, nil
}

// roots are the certificates of every CA of r, in r's order.
func (r *record) roots(cas map[string]*certs.CA) []*x509.Certificate {
	out := make([]*x509.Certificate, 0, len(r.Keys))
	for _, k := range r.Keys {
		out = append(out, cas[k.ID].Cert)
	}
	return out
}

// read reads and opens the record; nil when there is none.
func (s *Store) read() (*record, map[string]*certs.CA, *fsm.KV, error) {
	var rec record
	kv, err := s.record().Read(&rec)
	switch {
	case err != nil && errors.Is(err, keyrecord.ErrUnreadable):
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrBadRecord, err)
	case err != nil || kv == nil:
		return nil, nil, nil, err
	}
	if len(rec.Keys) == 0 || rotation.First(rec.entries(), rotation.Active) == nil {
		return nil, nil, nil, ErrBadRecord
	}
	cas, err := rec.cas()
	if err != nil {
		return nil, nil, nil, err
	}
	return &rec, cas, kv, nil
}

// write stores rec with a compare-and-swap on prev (nil: must not exist).
func (s *Store) write(ctx context.Context, prev *fsm.KV, rec *record) error {
	err := s.record().Write(ctx, prev, rec)
	if errors.Is(err, keyrecord.ErrConflict) {
		return fmt.Errorf("%w (%v)", ErrConflict, err)
	}
	return err
}

// record is the stored record (keyrecord).
func (s *Store) record() keyrecord.Record {
	return keyrecord.Record{Backend: s.cfg.Backend, Key: s.key(), AtRest: s.cfg.AtRest}
}

// key is the record's key.
func (s *Store) key() fsm.Key {
	return fsm.Key{Space: fsm.SpaceInternal, Resource: s.cfg.Kind.Resource, Name: "set"}
}

// Seed writes the record with ca, the CA directory's CA, as its
// active CA, unless a record is stored already. It runs on the leader at
// bootstrap and is idempotent.
func (s *Store) Seed(ctx context.Context, ca *certs.CA) error {
	rec, _, _, err := s.read()
	if err != nil || rec != nil {
		return err
	}
	bundle, err := ca.PEM()
	if err != nil {
		return err
	}
	seed := &record{Keys: []rotation.Keyed{{Entry: rotation.Entry{ID: certs.CertID(ca.Cert), Phase: rotation.Active}, Key: bundle}}}
	if err := s.write(ctx, nil, seed); err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	return nil
}

// Listener side.

// OnApply makes the node trust the record's CAs as it applies it, and
// wakes Run to bring the certificate in step.
func (s *Store) OnApply(events []fsm.Event) {
	for _, ev := range events {
		if ev.KV != nil && ev.KV.Key == s.key() {
			if err := s.syncTrust(); err != nil {
				s.cfg.Logger.Warn(s.cfg.Kind.Noun+"s not applied", "error", err)
			}
			s.wake()
			return
		}
	}
}

// OnIndex narrows the trust once the node has caught up, if it applied a
// record while catching up (widened): on the apply path, before whoever
// waits for this index is released, so that a request that caught up
// (Settle) or a node that just became fresh does not trust a CA a finish
// dropped until Run looks again (every 5 s). Otherwise it costs an
// atomic load.
func (s *Store) OnIndex(uint64) {
	if !s.widened.Load() || !s.caughtUp() {
		return
	}
	if err := s.syncTrust(); err != nil {
		s.cfg.Logger.Warn(s.cfg.Kind.Noun+"s not applied", "error", err)
	}
}

// Settle makes the node trust exactly the CAs of the record as applied
// now. The API calls it when a request on a node outside the staleness
// bound has caught up with a read index taken after it arrived
// (api.Config.CatchUp): the applied record is then at least as new as the
// request, so the CAs it no longer holds were dropped by a finish the
// cluster completed before the request, even if this node applied that
// finish while catching up (when syncTrust keeps them). A trust that is
// not widened is its record's already (OnApply syncs each record as it is
// applied), and that costs an atomic load.
func (s *Store) Settle() error {
	if !s.widened.Load() {
		return nil
	}
	return s.sync(true)
}

// OnRestore: a snapshot replaced the state. What the node trusts is then
// whatever it trusted before, possibly more than the snapshot's record
// holds (a finish it missed while cut off): it counts as widened until a
// sync says otherwise, so that OnIndex narrows it once caught up (the red
// team's finding, 2026-12-04).
func (s *Store) OnRestore(uint64) {
	s.widened.Store(true)
	s.wake()
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Store) caughtUp() bool { return s.cfg.CaughtUp == nil || s.cfg.CaughtUp() }

// syncTrust makes the node trust the record's CAs: exactly them once
// caught up, else those it trusts already as well (a node replaying its
// log never drops a CA for a moment of history).
func (s *Store) syncTrust() error { return s.sync(s.caughtUp()) }

// sync makes the node trust the record's CAs, exactly them when exact,
// else those it trusts already as well.
func (s *Store) sync(exact bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, cas, kv, err := s.read()
	if err != nil || rec == nil {
		return err
	}
	if kv.ModRevision < s.floor {
		// A record older than one the node has trusted already: history
		// it replays after a restart from an older snapshot, which
		// CheckCaughtUp cannot tell before the node hears from a leader.
		// The trust stays as the newer record left it.
		return nil
	}
	roots := rec.roots(cas)
	widened := false
	if !exact {
		for _, r := range s.cfg.Verifier.Roots() {
			if !slices.ContainsFunc(roots, r.Equal) {
				roots, widened = append(roots, r), true
			}
		}
	}
	if !sameRoots(roots, s.cfg.Verifier.Roots()) {
		s.cfg.Verifier.SetRoots(roots)
		s.reconnect()
		s.cfg.Logger.Info(s.cfg.Kind.Noun+"s trusted", "cas", ids(roots))
	}
	s.widened.Store(widened)
	if exact && kv.ModRevision != s.applied {
		if s.cfg.TrustFile != "" {
			if err := SaveTrust(s.cfg.TrustFile, roots, kv.ModRevision); err != nil {
				return err
			}
		}
		s.applied, s.floor = kv.ModRevision, kv.ModRevision
	}
	return nil
}

func sameRoots(a, b []*x509.Certificate) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(c *x509.Certificate) bool { return !slices.ContainsFunc(b, c.Equal) })
}

func ids(roots []*x509.Certificate) []string {
	out := make([]string, len(roots))
	for i, r := range roots {
		out[i] = certs.CertID(r)
	}
	return out
}

// Run keeps the node's trust and certificate in step with the record,
// once at start and after every change, until ctx ends; until it has
// caught up it looks again every half second, then every few seconds.
func (s *Store) Run(ctx context.Context) {
	// Until the first sync after catching up, the node may still trust
	// a CA a finish it missed dropped (its trust file): it looks every
	// half second, so that the window ends as soon as it has caught up
	// (docs/REDTEAM-cluster-ca.md CCA-6).
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	synced := false
	s.wake()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-tick.C:
		}
		if !s.caughtUp() {
			continue
		}
		if err := s.syncTrust(); err != nil {
			s.cfg.Logger.Warn(s.cfg.Kind.Noun+"s not applied", "error", err)
			continue
		}
		if !synced {
			synced = true
			tick.Reset(5 * time.Second)
		}
		if err := s.ensureCert(); err != nil {
			s.cfg.Logger.Warn("the active "+s.cfg.Kind.Noun+" not followed yet", "error", err)
		}
	}
}

// ensureCert gives the node a certificate issued by the active CA when the
// one it presents is not (or is near its end), with the chain Kind.Chain
// asks for: written to its data directory, then presented from the next
// handshake on. OnChange runs once the certificate is in step with a new
// record.
func (s *Store) ensureCert() error {
	rec, cas, kv, err := s.read()
	if err != nil || rec == nil {
		return err
	}
	s.mu.Lock()
	history, changed := kv.ModRevision < s.floor, kv.ModRevision != s.changed
	s.mu.Unlock()
	if history {
		return nil
	}
	active := cas[rotation.First(rec.entries(), rotation.Active).ID]
	var others []*certs.CA
	if s.cfg.Kind.Chain {
		for _, k := range rec.Keys {
			if k.ID != certs.CertID(active.Cert) {
				others = append(others, cas[k.ID])
			}
		}
	}
	if s.cfg.Cert != nil {
		cur := s.cfg.Cert.Get()
		covered := cur != nil && cur.Leaf != nil && active.Covers(cur.Leaf, s.cfg.Request)
		if !covered || !chained(cur, active, others) {
			if err := s.issue(cur, covered, active, others); err != nil {
				return err
			}
		}
	}
	if changed && s.cfg.OnChange != nil {
		all := make([]*certs.CA, 0, len(rec.Keys))
		for _, k := range rec.Keys {
			all = append(all, cas[k.ID])
		}
		if err := s.cfg.OnChange(all, active); err != nil {
			return fmt.Errorf("%w: %w", ErrNotFollowed, err)
		}
	}
	s.mu.Lock()
	s.changed = kv.ModRevision
	s.mu.Unlock()
	return nil
}

// issue presents a certificate of active (cur's leaf when covered, else
// one from CertFile or a new one), chained through active cross-signed by
// each of others.
func (s *Store) issue(cur *tls.Certificate, covered bool, active *certs.CA, others []*certs.CA) error {
	var pair tls.Certificate
	if covered {
		pair = *cur
	} else {
		var err error
		if pair, err = active.EnsurePair(s.cfg.CertFile, s.cfg.KeyFile, s.cfg.Request); err != nil {
			return err
		}
		if pair.Leaf == nil {
			if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return err
			}
		}
	}
	pair.Certificate = pair.Certificate[:1:1]
	for _, o := range others {
		cross, err := certs.CrossSign(active, o)
		if err != nil {
			return err
		}
		pair.Certificate = append(pair.Certificate, cross.Raw)
	}
	if s.cfg.Kind.Chain {
		var b []byte
		for _, der := range pair.Certificate {
			b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		if err := certs.WriteFileAtomic(s.cfg.CertFile, b, 0o644); err != nil {
			return err
		}
	}
	s.cfg.Cert.Set(pair)
	s.reconnect()
	s.cfg.Logger.Info("certificate of the active "+s.cfg.Kind.Noun+" presented", "ca", certs.CertID(active.Cert), "cross-signed-by", len(others))
	return nil
}

// chained reports whether cur carries, after its leaf, exactly active
// cross-signed by each of others.
func chained(cur *tls.Certificate, active *certs.CA, others []*certs.CA) bool {
	if len(cur.Certificate) != 1+len(others) {
		return false
	}
	var inter []*x509.Certificate
	for _, der := range cur.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return false
		}
		inter = append(inter, c)
	}
	for _, o := range others {
		if !slices.ContainsFunc(inter, func(c *x509.Certificate) bool { return certs.IsCrossOf(c, active.Cert, o.Cert) }) {
			return false
		}
	}
	return true
}

// reconnect runs Reconnect off the caller's goroutine: trust changes on
// the apply path, which must not wait on raft's transport.
func (s *Store) reconnect() {
	if s.cfg.Reconnect != nil {
		go s.cfg.Reconnect()
	}
}

// Facts are what a node reports to its peers (cluster.Config.Facts) for
// kind k: the id of the CA v trusts that issued the certificate c
// presents. The node reports it from its first RPC on, before any Store
// exists.
func Facts(k Kind, v Trust, c Cert) map[string]string {
	cur := c.Get()
	if cur == nil || cur.Leaf == nil {
		return nil
	}
	for _, r := range v.Roots() {
		if cur.Leaf.CheckSignatureFrom(r) == nil {
			return map[string]string{k.Fact: certs.CertID(r)}
		}
	}
	return nil
}

// PhaseCounts counts this node's CAs by phase, as it has applied them
// (trustplane_trust_root_keys).
func (s *Store) PhaseCounts() (map[rotation.Phase]int, error) {
	rec, _, _, err := s.read()
	if err != nil {
		return nil, err
	}
	out := map[rotation.Phase]int{rotation.Pending: 0, rotation.Active: 0, rotation.Retiring: 0}
	if rec != nil {
		for _, e := range rec.Keys {
			out[e.Phase]++
		}
	}
	return out, nil
}

// revisionHeader is the PEM header of TrustFile's blocks that carries the
// revision of the record the CAs are from.
const revisionHeader = "Record-Revision"

// LoadTrust reads the CAs a node trusted last (TrustFile) and the revision
// of the record they are from; nil when it has no such file.
func LoadTrust(path string) ([]*x509.Certificate, uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var out []*x509.Certificate
	var rev uint64
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !c.IsCA {
			return nil, 0, fmt.Errorf("caroots: %s is unreadable", path)
		}
		if r, err := strconv.ParseUint(block.Headers[revisionHeader], 10, 64); err == nil {
			rev = max(rev, r)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("caroots: %s holds no CA", path)
	}
	return out, rev, nil
}

// SaveTrust writes roots, from the record at revision rev, to path
// atomically.
func SaveTrust(path string, roots []*x509.Certificate, rev uint64) error {
	var b []byte
	for _, r := range roots {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{revisionHeader: strconv.FormatUint(rev, 10)}, Bytes: r.Raw})...)
	}
	return certs.WriteFileAtomic(path, b, 0o644)
}
