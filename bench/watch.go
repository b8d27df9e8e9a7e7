package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

const (
	// SentAnnotation carries the writer's send time (Unix nanoseconds) on
	// every object of the watch workload.
	SentAnnotation = "trustplane.io/bench-sent"
	// maxReopens bounds how often one watcher reopens its watch.
	maxReopens = 20
	// maxDrain bounds the wait for the last deliveries after the last
	// write.
	maxDrain = 10 * time.Second
)

var watchWorkload = &workload{
	name: "watch",
	detail: func(c Config) string {
		return fmt.Sprintf("one ADDED event delivered to one of %d watchers (latency: writer's send to receipt)", c.Watchers)
	},
	prepare: prepareFanout,
}

// fanout is the watch workload: Watchers watches on one namespace, each
// with its own connection and round-robin over the kubeconfigs, and one
// writer creating ConfigMaps stamped with their send time. Writer and
// watchers run in this process, so one clock measures the latency.
type fanout struct {
	e         *env
	ns        string
	watchers  []*watcher
	writes    atomic.Int64
	delivered atomic.Int64
	note      string
}

// watcher is one watch and how to reopen it.
type watcher struct {
	cs     kubernetes.Interface
	w      watch.Interface
	lastRV string
	cancel context.CancelFunc
}

func prepareFanout(ctx context.Context, e *env) (load, error) {
	if err := e.ensureNamespace(ctx, "watch"); err != nil {
		return nil, err
	}
	f := &fanout{e: e, ns: e.ns("watch")}
	l, err := e.client(0).CoreV1().ConfigMaps(f.ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("reading the watch namespace's resourceVersion: %w", err)
	}
	for i := range e.cfg.Watchers {
		cs, err := clientFor(e.eps[i%len(e.eps)], e.cfg)
		if err != nil {
			f.stop()
			return nil, err
		}
		w := &watcher{cs: cs, lastRV: l.ResourceVersion}
		if err := w.open(f.ns, e.cfg.RequestTimeout); err != nil {
			f.stop()
			return nil, fmt.Errorf("watcher %d: %w", i, err)
		}
		f.watchers = append(f.watchers, w)
	}
	return f, nil
}

// open starts the watch from lastRV, giving the server timeout to answer.
// The watch then lives until close, not bounded by the caller's context.
func (w *watcher) open(ns string, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	answered := time.AfterFunc(timeout, cancel)
	wi, err := w.cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: w.lastRV})
	if !answered.Stop() && err == nil {
		wi.Stop()
		err = fmt.Errorf("no answer within %v", timeout)
	}
	if err != nil {
		cancel()
		return err
	}
	w.w, w.cancel = wi, cancel
	return nil
}

func (w *watcher) close() {
	if w.w != nil {
		w.w.Stop()
		w.cancel()
		w.w = nil
	}
}

func (f *fanout) stop() {
	for _, w := range f.watchers {
		w.close()
	}
}

func (f *fanout) detail() string { return f.note }

func (f *fanout) run(ctx context.Context, deadline time.Time, rec *recorder) {
	defer f.stop()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range f.watchers {
		wg.Go(func() { f.follow(wctx, w, rec) })
	}
	f.write(ctx, deadline, rec)
	want := f.writes.Load() * int64(len(f.watchers))
	drainUntil := time.Now().Add(min(f.e.cfg.RequestTimeout, maxDrain))
	for f.delivered.Load() < want && time.Now().Before(drainUntil) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if missing := want - f.delivered.Load(); missing > 0 {
		rec.failures(missing, fmt.Errorf("%w: %d of %d", errMissingDeliveries, missing, want))
	}
	pace := "as fast as one writer can"
	if f.e.cfg.WatchRate > 0 {
		pace = fmt.Sprintf("paced at %g/s", f.e.cfg.WatchRate)
	}
	f.note = fmt.Sprintf("one ADDED event delivered to one of %d watchers (latency: writer's send to receipt); %d writes, %s",
		len(f.watchers), f.writes.Load(), pace)
}

// write creates stamped ConfigMaps until deadline, paced by WatchRate.
func (f *fanout) write(ctx context.Context, deadline time.Time, rec *recorder) {
	var tick <-chan time.Time
	if f.e.cfg.WatchRate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / f.e.cfg.WatchRate))
		defer t.Stop()
		tick = t.C
	}
	cms := f.e.client(0).CoreV1().ConfigMaps(f.ns)
	for seq := 0; ctx.Err() == nil && time.Now().Before(deadline); seq++ {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				return
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("w-%d", seq),
			Annotations: map[string]string{SentAnnotation: strconv.FormatInt(time.Now().UnixNano(), 10)},
		}, Data: map[string]string{"k": "v"}}
		rctx, cancel := context.WithTimeout(ctx, f.e.cfg.RequestTimeout)
		_, err := cms.Create(rctx, cm, metav1.CreateOptions{})
		cancel()
		if err != nil {
			rec.failure(fmt.Errorf("write: %w", err))
			time.Sleep(errorPause)
			continue
		}
		f.writes.Add(1)
	}
}

// follow records the latency of every stamped ADDED event w receives,
// reopening the watch from its last resourceVersion when the server ends
// it (a bounded number of times).
func (f *fanout) follow(ctx context.Context, w *watcher, rec *recorder) {
	reopens := 0
	for ctx.Err() == nil {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.w.ResultChan():
		case <-ctx.Done():
			return
		}
		if ok && ev.Type != watch.Error {
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM {
				w.lastRV = cm.ResourceVersion
				if sent, err := strconv.ParseInt(cm.Annotations[SentAnnotation], 10, 64); err == nil && ev.Type == watch.Added {
					rec.success(time.Since(time.Unix(0, sent)))
					f.delivered.Add(1)
				}
			}
			continue
		}
		if ok {
			rec.failure(fmt.Errorf("watch error event: %w", apierrors.FromObject(ev.Object)))
		}
		if ctx.Err() != nil {
			return
		}
		w.close()
		for w.w == nil {
			if reopens++; reopens > maxReopens || ctx.Err() != nil {
				return
			}
			if err := w.open(f.ns, f.e.cfg.RequestTimeout); err != nil {
				rec.failure(fmt.Errorf("reopening a watch: %w", err))
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}
