package caroots

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/internal/memlog"
)

// env is one node: the real fsm behind a one-voter log, its trust and
// certificate, the store subscribed to the fsm; presenting is what the
// voters report.
type env struct {
	t          *testing.T
	log        *memlog.Log
	seed       *certs.CA
	v          *certs.NodeVerifier
	cert       *certs.NodeCert
	s          *Store
	dir        string
	presenting map[string]string
	caughtUp   bool
}

func newEnv(t *testing.T, forbidden ...*x509.Certificate) *env {
	seed, err := certs.NewNodeCA()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, log: memlog.New(), seed: seed, v: certs.NewNodeVerifier(seed), dir: t.TempDir(), caughtUp: true}
	req := certs.NodeRequest("n1", "10.0.0.1")
	pair, err := seed.EnsurePair(filepath.Join(e.dir, "node.crt"), filepath.Join(e.dir, "node.key"), req)
	if err != nil {
		t.Fatal(err)
	}
	e.cert = certs.NewNodeCert(pair)
	e.s = New(Config{
		Kind: NodeKind, Backend: e.log, AtRest: storage.AtRest{}, Verifier: e.v, Cert: e.cert, Request: req,
		CertFile: filepath.Join(e.dir, "node.crt"), KeyFile: filepath.Join(e.dir, "node.key"), TrustFile: filepath.Join(e.dir, "trust.pem"),
		Members: func(context.Context) (map[string]uint64, error) {
			i := e.log.AppliedIndex()
			return map[string]uint64{"n1": i, "n2": i}, nil
		},
		Presenting: func(context.Context) (map[string]string, error) { return e.presenting, nil },
		Forbidden:  func() []*x509.Certificate { return forbidden },
		CaughtUp:   func() bool { return e.caughtUp },
		Now:        func() time.Time { return time.Unix(1000, 0) },
	})
	t.Cleanup(e.log.FSM.Subscribe(e.s))
	if err := e.s.Seed(context.Background(), seed); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) step(s rotation.Step, o rotation.Options) (*rotation.Status, error) {
	return rotation.Run(context.Background(), e.s.Root(), s, o)
}

func (e *env) mustStep(s rotation.Step, o rotation.Options) *rotation.Status {
	e.t.Helper()
	st, err := e.step(s, o)
	if err != nil {
		e.t.Fatalf("%s: %v", s, err)
	}
	return st
}

// sync is what Run does once the node is caught up.
func (e *env) sync() {
	e.t.Helper()
	if err := e.s.syncTrust(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.ensureCert(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) trusts(ids ...string) {
	e.t.Helper()
	var got []string
	for _, r := range e.v.Roots() {
		got = append(got, certs.CertID(r))
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		e.t.Fatalf("the node trusts %v, want %v", got, ids)
	}
	file, _, err := LoadTrust(filepath.Join(e.dir, "trust.pem"))
	if err != nil || len(file) != len(ids) {
		e.t.Fatalf("the trust file holds %d CAs (%v), want %d", len(file), err, len(ids))
	}
}

func (e *env) presents() string { return Facts(NodeKind, e.v, e.cert)[NodeKind.Fact] }

func TestNodeCARotation(t *testing.T) {
	e := newEnv(t)
	old := certs.CertID(e.seed.Cert)
	e.sync()
	e.trusts(old)
	if e.presents() != old {
		t.Fatalf("presents %q, want the seed %s", e.presents(), old)
	}

	// start: every node trusts the new CA as it applies the record.
	st := e.mustStep(rotation.StepStart, rotation.Options{})
	next := st.Keys[0].ID
	if st.Keys[0].Phase != rotation.Pending || st.Next != rotation.StepPromote {
		t.Fatalf("after start: %+v", st)
	}
	e.trusts(old, next)
	e.sync()
	if e.presents() != old {
		t.Fatal("a pending CA issued the node's certificate")
	}

	// promote: the node issues itself a certificate of the new CA.
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.presenting = map[string]string{"n1": next, "n2": old}
	if _, err := e.step(rotation.StepFinish, rotation.Options{}); !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), "n2 ("+old+")") {
		t.Fatalf("finish while n2 presents the old CA's certificate: %v", err)
	}
	e.sync()
	if e.presents() != next {
		t.Fatalf("after promote the node presents %q, want %s", e.presents(), next)
	}
	onDisk, _, err := LoadTrust(filepath.Join(e.dir, "node.crt")) // a leaf is no CA
	if err == nil || onDisk != nil {
		t.Fatal("LoadTrust took a leaf certificate for a CA")
	}

	// finish, once every voter presents the new CA's certificate.
	e.presenting = map[string]string{"n1": next, "n2": next}
	st = e.mustStep(rotation.StepFinish, rotation.Options{})
	if len(st.Keys) != 1 || st.Keys[0].ID != next {
		t.Fatalf("after finish: %+v", st)
	}
	e.trusts(next)

	// A second rotation aborted after promote: the node goes back to a
	// certificate of the CA that is active again.
	second := e.mustStep(rotation.StepStart, rotation.Options{}).Keys[0].ID
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.sync()
	if e.presents() != second {
		t.Fatalf("presents %q after the second promote, want %s", e.presents(), second)
	}
	e.mustStep(rotation.StepAbort, rotation.Options{})
	e.sync()
	if e.presents() != next {
		t.Fatalf("presents %q after abort, want %s again", e.presents(), next)
	}
	e.presenting = map[string]string{"n1": next, "n2": next}
	e.mustStep(rotation.StepFinish, rotation.Options{})
	e.trusts(next)
}

// finishWhileCatchingUp rotates to a new CA whose finish the node applies
// while it is catching up, so that it still trusts both CAs; it returns
// the new CA's id.
func (e *env) finishWhileCatchingUp() string {
	e.t.Helper()
	e.sync()
	next := e.mustStep(rotation.StepStart, rotation.Options{}).Keys[0].ID
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.caughtUp = false
	e.presenting = map[string]string{"n1": next}
	e.mustStep(rotation.StepFinish, rotation.Options{})
	if got := len(e.v.Roots()); got != 2 {
		e.t.Fatalf("a node catching up trusts %d CAs, want both still", got)
	}
	return next
}

// A node that replays its log trusts more CAs for a while, never fewer.
func TestNodeCATrustOnlyGrowsWhileCatchingUp(t *testing.T) {
	e := newEnv(t)
	old := certs.CertID(e.seed.Cert)
	next := e.finishWhileCatchingUp()
	e.caughtUp = true
	e.sync()
	e.trusts(next)
	if e.presents() != next {
		t.Fatalf("presents %q, want %s (not %s)", e.presents(), next, old)
	}
}

// A CA a finish dropped while the node was catching up stops being
// trusted as soon as the node has caught up: at once for a request that
// caught up with a read index (Settle, even before CheckCaughtUp passes),
// and at the first index applied once caught up (OnIndex), not at Run's
// next look, 5 s later (the red team's finding, 2026-12-04).
func TestDroppedCAGoesOnceCaughtUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		narrow func(e *env)
	}{
		{"a request caught up", func(e *env) {
			if err := e.s.Settle(); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"the node caught up", func(e *env) {
			e.caughtUp = true
			e.s.OnIndex(0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			next := e.finishWhileCatchingUp()
			e.s.OnIndex(0) // still catching up: nothing changes
			if got := len(e.v.Roots()); got != 2 {
				t.Fatalf("an index applied while catching up narrowed the trust to %d CAs", got)
			}
			tc.narrow(e)
			e.trusts(next)
		})
	}
}

// A finish the node missed while cut off and then received in a snapshot
// (its log compacted meanwhile) goes the same way: the restore leaves the
// node trusting what it did before, which OnIndex narrows once caught up
// (the red team's finding, 2026-12-04).
func TestDroppedCAByRestoreGoesOnceCaughtUp(t *testing.T) {
	e := newEnv(t)
	e.sync()
	next := e.mustStep(rotation.StepStart, rotation.Options{}).Keys[0].ID
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.sync()
	before := e.v.Roots() // what the node trusts when cut off
	e.presenting = map[string]string{"n1": next}
	e.mustStep(rotation.StepFinish, rotation.Options{})
	snap, err := e.log.FSM.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bytes.Buffer
	if err := snap.Persist(&bufferSink{&sink}); err != nil {
		t.Fatal(err)
	}
	e.v.SetRoots(before) // the cut-off node never applied the finish
	e.s.widened.Store(false)
	e.caughtUp = false
	if err := e.log.FSM.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := len(e.v.Roots()); got != 2 {
		t.Fatalf("restored while catching up, the node trusts %d CAs, want both still", got)
	}
	e.caughtUp = true
	e.s.OnIndex(0) // the first index applied once caught up
	e.trusts(next)
}

// bufferSink is a raft.SnapshotSink over a buffer.
type bufferSink struct{ *bytes.Buffer }

func (bufferSink) ID() string    { return "test" }
func (bufferSink) Cancel() error { return nil }
func (bufferSink) Close() error  { return nil }

func TestNodeCAStartRefusals(t *testing.T) {
	cluster, err := certs.NewNodeCA() // stands for the cluster CA
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, cluster.Cert)
	bundle, err := cluster.PEM()
	if err != nil {
		t.Fatal(err)
	}
	leafPEM, leafKey, err := cluster.Issue(certs.NodeRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	// The cluster CA re-issued: another serial, the same key.
	tmpl := *cluster.Cert
	tmpl.SerialNumber = big.NewInt(42)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, cluster.Key.Public(), cluster.Key)
	if err != nil {
		t.Fatal(err)
	}
	reissued := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), bundle[len(cluster.CertPEM):]...)
	for _, tc := range []struct {
		name string
		key  []byte
		want string
	}{
		{"the cluster CA", bundle, "already a CA of another kind"},
		{"the cluster CA re-issued", reissued, "already a CA of another kind"},
		{"a leaf certificate", append(leafPEM, leafKey...), "not a CA certificate"},
		{"a certificate without its key", cluster.CertPEM, "needs a certificate and its private key"},
		{"garbage", []byte("-----BEGIN CERTIFICATE-----\nsecret\n-----END CERTIFICATE-----\n"), "needs a certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.step(rotation.StepStart, rotation.Options{Key: tc.key})
			if !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "secret") {
				t.Fatalf("start with %s: %v", tc.name, err)
			}
			if st := e.mustStep(rotation.StepStatus, rotation.Options{}); len(st.Keys) != 1 {
				t.Fatalf("a refused start changed the set: %+v", st)
			}
		})
	}
	// The operator's own CA is taken, and its key shows nowhere.
	own, err := certs.NewNodeCA()
	if err != nil {
		t.Fatal(err)
	}
	ownPEM, _ := own.PEM()
	st := e.mustStep(rotation.StepStart, rotation.Options{Key: ownPEM})
	if st.Keys[0].ID != certs.CertID(own.Cert) || strings.Contains(st.Done, "PRIVATE") {
		t.Fatalf("start with the operator's CA: %+v", st)
	}
}

// A voter of an older build, which trusts its CA directory's node CA
// alone, holds back start and promote, even forced.
func TestNodeCAWaitsForEveryBuild(t *testing.T) {
	e := newEnv(t)
	unable := []string{"n3"}
	e.s.cfg.Unable = func(context.Context) ([]string, error) { return unable, nil }
	for _, step := range []rotation.Step{rotation.StepStart, rotation.StepPromote} {
		if _, err := e.step(step, rotation.Options{Force: true}); !errors.Is(err, rotation.ErrNotReady) || !strings.Contains(err.Error(), "[n3] run a build") {
			t.Fatalf("%s with an older voter: %v", step, err)
		}
		unable = nil
		e.mustStep(step, rotation.Options{})
		unable = []string{"n3"}
	}
}

// A node restarted from a snapshot older than the record it last trusted
// (its trust file says which) replays that history without changing its
// trust, saving it, or issuing itself a certificate of a retired CA, even
// while it believes it is caught up (docs/REDTEAM-node-ca.md NCA-1).
func TestNodeCAHistoryAfterARestart(t *testing.T) {
	e := newEnv(t)
	e.sync()
	old := certs.CertID(e.seed.Cert)
	start := e.mustStep(rotation.StepStart, rotation.Options{}) // the record an old snapshot holds
	next := start.Keys[0].ID
	e.mustStep(rotation.StepPromote, rotation.Options{})
	e.presenting = map[string]string{"n1": next, "n2": next}
	e.sync()
	e.mustStep(rotation.StepFinish, rotation.Options{})
	e.trusts(next)
	_, rev, err := LoadTrust(filepath.Join(e.dir, "trust.pem"))
	if err != nil || rev == 0 {
		t.Fatalf("the trust file holds revision %d (%v)", rev, err)
	}

	// The restarted node: the state it replays is the start's record
	// again, it trusts what its trust file says, and holds its new-CA
	// certificate.
	replay := memlog.New()
	r := New(Config{
		Backend: replay, AtRest: storage.AtRest{}, Verifier: e.v, Cert: e.cert, Request: certs.NodeRequest("n1", "10.0.0.1"),
		CertFile: filepath.Join(e.dir, "node.crt"), KeyFile: filepath.Join(e.dir, "node.key"), TrustFile: filepath.Join(e.dir, "trust.pem"),
		TrustRevision: rev, CaughtUp: func() bool { return true },
	})
	if err := r.Seed(context.Background(), e.seed); err != nil { // an old record: the seed CA alone
		t.Fatal(err)
	}
	if err := r.syncTrust(); err != nil {
		t.Fatal(err)
	}
	if err := r.ensureCert(); err != nil {
		t.Fatal(err)
	}
	if got := e.v.Roots(); len(got) != 1 || certs.CertID(got[0]) != next { // nothing dropped, nothing added back
		t.Fatalf("the restarted node trusts %d CAs, want %s alone, not %s again", len(got), next, old)
	}
	if got := e.presents(); got != next {
		t.Fatalf("the restarted node presents %q, want still %s", got, next)
	}
	if file, _, _ := LoadTrust(filepath.Join(e.dir, "trust.pem")); len(file) != 1 || certs.CertID(file[0]) != next {
		t.Fatal("the history's record was saved as the node's trust")
	}
}
