package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RunLabel marks every namespace and CSR a run creates; its value is the
// run's id. Cleanup deletes by it.
const RunLabel = "trustplane.io/bench-run"

// NamespacePrefix starts the name of every namespace a run creates.
const NamespacePrefix = "trustplane-bench-"

// env is what the workloads of one run share: the clients, the run's
// namespaces, and fixtures prepared at most once (the objects gets read,
// the seeded list, the token, the CSR watch).
type env struct {
	cfg     Config
	eps     []endpoint
	runID   string
	clients []kubernetes.Interface
	prog    *progress

	// setupMu serialises fixtures (ready holds those done); nsMu
	// serialises namespace creation; mu guards the lists below.
	setupMu sync.Mutex
	ready   map[string]bool
	nsMu    sync.Mutex
	// Set by their fixtures, then read only.
	token string     // a ServiceAccount token (fixture "token")
	csrs  *csrWaiter // the run's CSR watch (fixture "csrs")

	mu         sync.Mutex
	namespaces []string // created by this run, in order
	stops      []func()
}

func newEnv(cfg Config, eps []endpoint, prog *progress) (*env, error) {
	e := &env{cfg: cfg, eps: eps, runID: newRunID(), prog: prog, ready: map[string]bool{}}
	for i := range cfg.Clients {
		cs, err := clientFor(eps[i%len(eps)], cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: kubeconfig %s: %v", ErrUnreachable, eps[i%len(eps)].kubeconfig, err)
		}
		e.clients = append(e.clients, cs)
	}
	return e, nil
}

// newRunID is 8 random characters valid in a DNS label.
func newRunID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// client is the clientset of client i (round-robin over the kubeconfigs).
func (e *env) client(i int) kubernetes.Interface { return e.clients[i%len(e.clients)] }

// ns is the run's namespace with the given suffix ("" for the main one).
func (e *env) ns(suffix string) string {
	if suffix == "" {
		return NamespacePrefix + e.runID
	}
	return NamespacePrefix + e.runID + "-" + suffix
}

// once runs prepare until it has succeeded once for key (a failure is
// not remembered: the next workload that needs the fixture tries again).
// Preparations are serialised; prepare must not call once itself.
func (e *env) once(key string, prepare func() error) error {
	e.setupMu.Lock()
	defer e.setupMu.Unlock()
	if e.ready[key] {
		return nil
	}
	if err := prepare(); err != nil {
		return err
	}
	e.ready[key] = true
	return nil
}

// onClose registers what to stop when the run ends (informers, watches).
func (e *env) onClose(stop func()) {
	e.mu.Lock()
	e.stops = append(e.stops, stop)
	e.mu.Unlock()
}

// close stops what was registered with onClose, last first.
func (e *env) close() {
	e.mu.Lock()
	stops := e.stops
	e.stops = nil
	e.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// ensureNamespace creates the run's namespace with suffix, once. A
// namespace of that name that already exists is an error: it is not the
// run's, and cleanup would delete it.
func (e *env) ensureNamespace(ctx context.Context, suffix string) error {
	name := e.ns(suffix)
	e.nsMu.Lock()
	defer e.nsMu.Unlock()
	for _, n := range e.created() {
		if n == name {
			return nil
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: e.runID}}}
	if _, err := e.client(0).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	e.mu.Lock()
	e.namespaces = append(e.namespaces, name)
	e.mu.Unlock()
	return nil
}

// created lists the namespaces this run created.
func (e *env) created() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.namespaces...)
}
