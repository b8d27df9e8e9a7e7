package api

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/kubernetes/pkg/apis/certificates"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// The fuzz harness of the api package: the real handlers (serveResource,
// without the recovery filter, so that a panic fails the target), the real
// registry stores, strategies and field managers, over the real fsm. The
// log in front of the fsm is a one-voter log that applies each command at
// the next index, what a single raft node does without the disk and the
// network, so that the state can be put back after every input: each input
// starts from the same state and a crash replays from its input alone.

// memLog is the real fsm behind a one-voter log.
type memLog struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
}

func (l *memLog) Propose(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	res, ok := l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: cmd.Encode()}).(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("entry %d: no result", l.index)
	}
	return res, nil
}
func (l *memLog) ReadIndex(context.Context) (uint64, error) { return l.f.AppliedIndex(), nil }
func (l *memLog) AppliedIndex() uint64                      { return l.f.AppliedIndex() }
func (l *memLog) WaitApplied(ctx context.Context, index uint64) error {
	return l.f.WaitApplied(ctx, index)
}
func (l *memLog) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) { return l.f.Get(key, rev) }
func (l *memLog) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return l.f.List(p, opts)
}

// snapshotSink keeps a persisted fsm snapshot in memory.
type snapshotSink struct{ bytes.Buffer }

func (*snapshotSink) ID() string    { return "fuzz" }
func (*snapshotSink) Cancel() error { return nil }
func (*snapshotSink) Close() error  { return nil }

// fuzzEnv is one node's API over a bootstrapped registry holding one object
// of each kind the targets write to, in namespace "fuzz".
type fuzzEnv struct {
	s        *Server
	log      *memLog
	handler  http.Handler
	baseline []byte // fsm snapshot after setup
	base     uint64 // applied index of baseline
	csrPEM   []byte // a valid CSR, for seeds
	caPEM    []byte // a CA certificate, for seeds
}

const fuzzNS = "fuzz"

// fuzzAdmin is the caller of every fuzzed request.
var fuzzAdmin = &user.DefaultInfo{Name: "fuzz-admin", UID: "fuzz-admin-uid", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

var (
	fuzzEnvOnce sync.Once
	fuzzEnvVal  *fuzzEnv
	fuzzEnvErr  error
)

// newFuzzEnv builds the environment once per process (building the field
// managers and OpenAPI documents takes a while); every target resets it
// before each input.
func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	fuzzEnvOnce.Do(func() { fuzzEnvVal, fuzzEnvErr = buildFuzzEnv(false) })
	if fuzzEnvErr != nil {
		tb.Fatal(fuzzEnvErr)
	}
	fuzzEnvVal.reset(tb)
	return fuzzEnvVal
}

// buildFuzzEnv builds the harness; with watches, the storage layer has a
// watch cache fed from the fsm.
func buildFuzzEnv(watches bool) (*fuzzEnv, error) {
	l := &memLog{f: fsm.New()}
	resources := append(append(registry.CoreResources(), registry.RBACResources()...), registry.CertificateResources("v1beta1")...)
	// No idle sweep: TestSharedObjectsNotModified holds the shared objects
	// for seconds and checks that the servers read those very objects.
	scfg := &storage.Config{FreshWait: 20 * time.Millisecond, NoIdleSweep: true}
	if watches {
		scfg.Feed = l.f
	}
	stor, err := storage.New(scfg, l)
	if err != nil {
		return nil, err
	}
	reg := registry.New(stor, resources, nil)
	ctx := genericapirequest.WithUser(context.Background(), fuzzAdmin)
	if err := reg.Bootstrap(genericapirequest.WithNamespace(ctx, ""), net.ParseIP("10.96.0.1"), 6443); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice", Organization: []string{"team"}}}, key)
	if err != nil {
		return nil, err
	}
	csrPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	caDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fuzz-ca"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, &x509.Certificate{Subject: pkix.Name{CommonName: "fuzz-ca"}}, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "fuzz"}, Annotations: map[string]string{"a": "b"}}
	}
	v1 := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Version: "v1", Resource: r}
	}
	rbacV1 := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: rbac.GroupName, Version: "v1", Resource: r}
	}
	// The pod is defaulted as a decoded request body would be.
	extPod := &corev1.Pod{ObjectMeta: meta("p"), Spec: corev1.PodSpec{
		ServiceAccountName: "sa",
		Containers:         []corev1.Container{{Name: "c", Image: "i", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}},
	}}
	registry.Scheme.Default(extPod)
	pod := &api.Pod{}
	if err := registry.Scheme.Convert(extPod, pod, nil); err != nil {
		return nil, err
	}
	objects := []struct {
		gvr schema.GroupVersionResource
		ns  string
		obj runtime.Object
	}{
		{v1("namespaces"), "", &api.Namespace{ObjectMeta: meta(fuzzNS)}},
		{v1("configmaps"), fuzzNS, &api.ConfigMap{ObjectMeta: meta("cm"), Data: map[string]string{"k": "v"}}},
		{v1("secrets"), fuzzNS, &api.Secret{ObjectMeta: meta("s"), Type: api.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}}},
		{v1("serviceaccounts"), fuzzNS, &api.ServiceAccount{ObjectMeta: meta("sa")}},
		{v1("pods"), fuzzNS, pod},
		{rbacV1("clusterroles"), "", &rbac.ClusterRole{ObjectMeta: meta("cr"), Rules: []rbac.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}},
		{rbacV1("roles"), fuzzNS, &rbac.Role{ObjectMeta: meta("r"), Rules: []rbac.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}},
		{schema.GroupVersionResource{Group: certificates.GroupName, Version: "v1beta1", Resource: "clustertrustbundles"}, "", &certificates.ClusterTrustBundle{
			ObjectMeta: meta("ctb"), Spec: certificates.ClusterTrustBundleSpec{TrustBundle: string(caPEM)},
		}},
		{schema.GroupVersionResource{Group: certificates.GroupName, Version: "v1", Resource: "certificatesigningrequests"}, "", &certificates.CertificateSigningRequest{
			ObjectMeta: meta("csr"),
			Spec: certificates.CertificateSigningRequestSpec{
				Request: csrPEM, SignerName: "kubernetes.io/kube-apiserver-client",
				Usages: []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth},
			},
		}},
	}
	for _, o := range objects {
		st := reg.Store(o.gvr)
		if st == nil {
			return nil, fmt.Errorf("no store for %v", o.gvr)
		}
		if _, err := st.Create(genericapirequest.WithNamespace(ctx, o.ns), o.obj, false); err != nil {
			return nil, fmt.Errorf("create %v %s: %w", o.gvr, o.ns, err)
		}
	}
	// The token APIs (TokenRequest, TokenReview, SelfSubjectReview) over
	// a signing key in the fsm, as cmd/trustplane registers them.
	keys := authn.NewKeyStore(l, l.f, storage.AtRest{})
	if err := keys.EnsureKey(ctx); err != nil {
		return nil, err
	}
	acfg := authn.DefaultConfig()
	acfg.CacheTTL = 0
	acfg.ExternalAddress = "127.0.0.1:6443"
	id, err := authn.New(acfg, keys, reg)
	if err != nil {
		return nil, err
	}
	for _, v := range id.Virtuals {
		reg.AddVirtual(v)
	}
	cfg := DefaultConfig()
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{}}}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, reg)
	if err != nil {
		return nil, err
	}
	snap, err := l.f.Snapshot()
	if err != nil {
		return nil, err
	}
	var sink snapshotSink
	if err := snap.Persist(&sink); err != nil {
		return nil, err
	}
	snap.Release()
	// As the server's chain, minus authentication (the caller is fixed)
	// and minus recovery (a panic must fail the target).
	handler := filters.WithWarningRecorder(http.HandlerFunc(s.serveResource))
	return &fuzzEnv{s: s, log: l, handler: handler, baseline: sink.Bytes(), base: l.f.AppliedIndex(), csrPEM: csrPEM, caPEM: caPEM}, nil
}

// reset puts the fsm back to the state after setup if an input changed it.
func (e *fuzzEnv) reset(tb testing.TB) {
	tb.Helper()
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	if e.log.index == e.base && e.log.f.AppliedIndex() == e.base {
		return
	}
	if err := e.log.f.Restore(io.NopCloser(bytes.NewReader(e.baseline))); err != nil {
		tb.Fatal(err)
	}
	e.log.index = e.base
}

// do serves one request as fuzzAdmin.
func (e *fuzzEnv) do(method, path, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "fuzz/v0")
	req = req.WithContext(genericapirequest.WithUser(req.Context(), fuzzAdmin))
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	return rec
}

// state is every stored object (key, value and resourceVersion) in key
// order, to compare before and after a request.
func (e *fuzzEnv) state(tb testing.TB) string {
	tb.Helper()
	var b strings.Builder
	for _, st := range e.s.reg.Stores() {
		res, err := e.log.f.List(fsm.Prefix{Group: st.GVR.Group, Resource: st.GVR.Resource}, fsm.ListOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		for _, kv := range res.KVs {
			fmt.Fprintf(&b, "%s@%d=%x\n", kv.Key, kv.ModRevision, kv.Value)
		}
	}
	return b.String()
}

// checkAnswer fails unless an error answer is a failure Status carrying the
// response's code and the stored state is what it was before the request:
// nothing a client sends may change state on an error.
func (e *fuzzEnv) checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, before string) {
	t.Helper()
	if rec.Code < 400 {
		return
	}
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || st.Status != metav1.StatusFailure || int(st.Code) != rec.Code {
		t.Fatalf("error answer %d is not a failure Status with its code: %v\n%.500s", rec.Code, err, rec.Body.String())
	}
	if after := e.state(t); after != before {
		t.Fatalf("answer %d (%s) but the stored state changed:\nbefore:\n%s\nafter:\n%s", rec.Code, st.Message, before, after)
	}
}

// parseCSRPEM parses a CSR as kube's certificates validation does.
func parseCSRPEM(b []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("no CERTIFICATE REQUEST block")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// pick returns list[i mod len(list)].
func pick[T any](list []T, i uint8) T { return list[int(i)%len(list)] }
