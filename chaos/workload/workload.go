package workload

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/chaos/history"
)

// RunLabel is the label every object of a run carries; its value is the
// run's ID.
const RunLabel = "chaos.trustplane.io/run"

// Endpoint is one node the workload talks to.
type Endpoint struct {
	Name   string
	Config *rest.Config
}

// Config shapes the workload.
type Config struct {
	Endpoints []Endpoint
	// Namespace holds the run's ConfigMaps; it is created if missing.
	Namespace string
	// RunID labels the run's objects and prefixes their names.
	RunID string
	// Clients is how many writer/reader clients run at once; Keys how many
	// ConfigMap names they share (fewer keys, more contention).
	Clients int
	Keys    int
	// CSRInterval is the pause between CSR creations (0: no CSRs).
	CSRInterval time.Duration
	// TokenInterval is the pause between ServiceAccount tokens minted,
	// reviewed and verified (0: no tokens).
	TokenInterval time.Duration
	// Timeout bounds each request.
	Timeout time.Duration
	// WatchCut is the mean time between deliberate watch disconnects.
	WatchCut time.Duration
	Seed     int64
}

func (c *Config) defaults() {
	if c.Namespace == "" {
		c.Namespace = "trustplane-chaos"
	}
	if c.Clients <= 0 {
		c.Clients = 8
	}
	if c.Keys <= 0 {
		c.Keys = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.WatchCut <= 0 {
		c.WatchCut = 30 * time.Second
	}
}

// Workload is a configured set of clients.
type Workload struct {
	cfg     Config
	rec     *Recorder
	clients []*kubernetes.Clientset

	// known is the latest (resourceVersion) any client saw per key, so
	// updates usually carry a precondition that can succeed.
	mu    sync.Mutex
	known map[string]uint64
	// failing marks the clients whose last answer was a server or
	// network error; they back off before the next request.
	failing map[int]bool
}

// New builds a clientset per endpoint.
func New(cfg Config, rec *Recorder) (*Workload, error) {
	cfg.defaults()
	w := &Workload{cfg: cfg, rec: rec, known: map[string]uint64{}, failing: map[int]bool{}}
	for _, e := range cfg.Endpoints {
		rc := rest.CopyConfig(e.Config)
		rc.QPS, rc.Burst = 5000, 10000
		rc.Timeout = cfg.Timeout
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("workload: client for %s: %w", e.Name, err)
		}
		w.clients = append(w.clients, cs)
	}
	if len(w.clients) == 0 {
		return nil, fmt.Errorf("workload: no endpoints")
	}
	return w, nil
}

// Prepare creates the run's namespace and returns the resourceVersion the
// run starts at, read linearizably, so that every write of the run is
// after it. It retries until ctx ends: the cluster may still be settling.
func (w *Workload) Prepare(ctx context.Context) (uint64, error) {
	var last error
	for attempt := 0; attempt < 120; attempt++ {
		for _, cs := range w.clients {
			rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
			_, err := cs.CoreV1().Namespaces().Create(rctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.cfg.Namespace}}, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				var l *corev1.ConfigMapList
				l, err = cs.CoreV1().ConfigMaps(w.cfg.Namespace).List(rctx, metav1.ListOptions{LabelSelector: w.selector()})
				if err == nil {
					cancel()
					return parseRV(l.ResourceVersion), nil
				}
			}
			cancel()
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("workload: preparing the namespace: %w", last)
}

func (w *Workload) selector() string { return RunLabel + "=" + w.cfg.RunID }

func (w *Workload) key(i int) string { return fmt.Sprintf("%s-k%d", w.cfg.RunID, i) }

// Keys lists every ConfigMap name the run may touch.
func (w *Workload) Keys() []string {
	keys := make([]string, w.cfg.Keys)
	for i := range keys {
		keys[i] = w.key(i)
	}
	return keys
}

// Run drives the clients until ctx ends and waits for them. The watchers
// it starts run on until watchCtx ends: the caller ends it after reading
// the final states, so that the watches deliver every write the clients
// made, including the last ones answered after ctx ended.
func (w *Workload) Run(ctx, watchCtx context.Context, startRV uint64) (watchersDone <-chan struct{}) {
	var wg, watchers sync.WaitGroup
	for i := 0; i < w.cfg.Clients; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			w.client(ctx, id, rand.New(rand.NewSource(w.cfg.Seed+int64(id))))
		}(i)
	}
	if w.cfg.CSRInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.csrClient(ctx, w.cfg.Clients, rand.New(rand.NewSource(w.cfg.Seed-1)))
		}()
	}
	if w.cfg.TokenInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.tokenClient(ctx, w.cfg.Clients+1, rand.New(rand.NewSource(w.cfg.Seed-2)))
		}()
	}
	for i := range w.clients {
		for _, res := range []history.Resource{history.ConfigMaps, history.CSRs} {
			if res == history.CSRs && w.cfg.CSRInterval <= 0 {
				continue
			}
			watchers.Add(1)
			go func(i int, res history.Resource) {
				defer watchers.Done()
				w.watch(watchCtx, i, res, startRV, rand.New(rand.NewSource(w.cfg.Seed+int64(1000+i))))
			}(i, res)
		}
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { watchers.Wait(); close(done) }()
	return done
}

func (w *Workload) remember(key string, rv uint64) {
	w.mu.Lock()
	if rv > w.known[key] {
		w.known[key] = rv
	}
	w.mu.Unlock()
}

func (w *Workload) forget(key string) {
	w.mu.Lock()
	delete(w.known, key)
	w.mu.Unlock()
}

func (w *Workload) lastRV(key string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.known[key]
}

// client is one writer/reader: each step picks a key and an operation.
func (w *Workload) client(ctx context.Context, id int, rng *rand.Rand) {
	// Each client keeps to one node, as a real client keeps to the
	// apiserver it connected to: a node that hangs stalls its own clients
	// only, and the timeline shows the others carrying on.
	node := id % len(w.clients)
	seq := 0
	for ctx.Err() == nil {
		if w.backoff(ctx, id) {
			continue
		}
		key := w.key(rng.Intn(w.cfg.Keys))
		seq++
		value := fmt.Sprintf("c%d-%d", id, seq)
		switch p := rng.Intn(100); {
		case p < 15:
			w.put(ctx, id, node, key, value, 0)
		case p < 50:
			if rv := w.lastRV(key); rv != 0 {
				// Now and then a stale precondition, to see a true 409.
				if rng.Intn(10) == 0 {
					rv--
				}
				w.put(ctx, id, node, key, value, rv)
			} else {
				w.put(ctx, id, node, key, value, 0)
			}
		case p < 60:
			rv := uint64(0)
			if rng.Intn(2) == 0 {
				rv = w.lastRV(key)
			}
			w.delete(ctx, id, node, key, rv)
		case p < 75:
			w.get(ctx, id, node, key, false)
		case p < 80:
			w.get(ctx, id, node, key, true)
		case p < 93:
			w.list(ctx, id, node, false)
		default:
			w.list(ctx, id, node, true)
		}
	}
}

// record keeps op in the history and marks its client for a backoff when
// the answer was an error of the server or the network.
func (w *Workload) record(op history.Op) {
	w.rec.op(op)
	bad := op.Outcome == history.Unknown || (op.Outcome == history.Fail && (op.Code == 0 || op.Code >= 500 || op.Code == 429))
	if bad {
		w.mu.Lock()
		w.failing[op.Client] = true
		w.mu.Unlock()
	}
}

// backoff pauses a client whose last answer was an error of the server
// or the network (not a refusal such as a 409): a client hammering a dead
// node would only fill the history with refused connections.
func (w *Workload) backoff(ctx context.Context, id int) bool {
	w.mu.Lock()
	failing := w.failing[id]
	w.mu.Unlock()
	if !failing {
		return false
	}
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
	w.mu.Lock()
	w.failing[id] = false
	w.mu.Unlock()
	return ctx.Err() != nil
}

func (w *Workload) cm(key, value string, rv uint64) *corev1.ConfigMap {
	c := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: w.cfg.Namespace, Labels: map[string]string{RunLabel: w.cfg.RunID}},
		Data:       map[string]string{"v": value},
	}
	if rv != 0 {
		c.ResourceVersion = strconv.FormatUint(rv, 10)
	}
	return c
}

func (w *Workload) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	// A request in flight when the run ends still gets its answer: the
	// history must not record an unknown that was only our impatience.
	return context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Timeout)
}

// put creates key (rv 0) or updates it with rv as its precondition.
func (w *Workload) put(ctx context.Context, id, node int, key, value string, rv uint64) {
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.Create, Key: key, Value: value, ExpectRV: rv, Call: w.rec.Now()}
	cms := w.clients[node].CoreV1().ConfigMaps(w.cfg.Namespace)
	rctx, cancel := w.reqCtx(ctx)
	var got *corev1.ConfigMap
	var err error
	if rv == 0 {
		got, err = cms.Create(rctx, w.cm(key, value, 0), metav1.CreateOptions{})
	} else {
		op.Kind = history.Update
		got, err = cms.Update(rctx, w.cm(key, value, rv), metav1.UpdateOptions{})
	}
	cancel()
	op.Return = w.rec.Now()
	op.Outcome, op.Code, op.Reason = outcome(err)
	if err == nil {
		op.RV = parseRV(got.ResourceVersion)
		w.remember(key, op.RV)
	}
	w.record(op)
}

func (w *Workload) delete(ctx context.Context, id, node int, key string, rv uint64) {
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.Delete, Key: key, ExpectRV: rv, Call: w.rec.Now()}
	var opts metav1.DeleteOptions
	if rv != 0 {
		s := strconv.FormatUint(rv, 10)
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &s}
	}
	rctx, cancel := w.reqCtx(ctx)
	err := w.clients[node].CoreV1().ConfigMaps(w.cfg.Namespace).Delete(rctx, key, opts)
	cancel()
	op.Return = w.rec.Now()
	op.Outcome, op.Code, op.Reason = outcome(err)
	if err == nil {
		w.forget(key)
	}
	w.record(op)
}

func (w *Workload) get(ctx context.Context, id, node int, key string, local bool) {
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.Get, Key: key, Local: local, Call: w.rec.Now()}
	var opts metav1.GetOptions
	if local {
		opts.ResourceVersion = "0"
	}
	rctx, cancel := w.reqCtx(ctx)
	got, err := w.clients[node].CoreV1().ConfigMaps(w.cfg.Namespace).Get(rctx, key, opts)
	cancel()
	op.Return = w.rec.Now()
	switch {
	case err == nil:
		op.Outcome, op.Exists, op.Read, op.RV = history.OK, true, got.Data["v"], parseRV(got.ResourceVersion)
		w.remember(key, op.RV)
	case apierrors.IsNotFound(err):
		op.Outcome, op.Code = history.OK, 404
	default:
		// A read that got no answer tells nothing; it is kept for the
		// availability timeline only.
		_, op.Code, op.Reason = outcome(err)
		op.Outcome = history.Unknown
	}
	w.record(op)
}

func (w *Workload) list(ctx context.Context, id, node int, local bool) {
	op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.List, Local: local, Call: w.rec.Now()}
	opts := metav1.ListOptions{LabelSelector: w.selector()}
	if local {
		opts.ResourceVersion = "0"
	}
	rctx, cancel := w.reqCtx(ctx)
	got, err := w.clients[node].CoreV1().ConfigMaps(w.cfg.Namespace).List(rctx, opts)
	cancel()
	op.Return = w.rec.Now()
	if err != nil {
		_, op.Code, op.Reason = outcome(err)
		op.Outcome = history.Unknown
		w.record(op)
		return
	}
	op.Outcome, op.RV = history.OK, parseRV(got.ResourceVersion)
	op.Items = make(map[string]history.Item, len(got.Items))
	for _, it := range got.Items {
		op.Items[it.Name] = history.Item{Value: it.Data["v"], RV: parseRV(it.ResourceVersion)}
	}
	w.record(op)
}

func parseRV(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}
