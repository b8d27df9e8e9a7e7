package workload

import (
	"context"
	"math/rand"
	"net/http"
	"strconv"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/trustplane/trustplane/chaos/history"
)

// watch keeps one watch of res open on node i for the whole run. Each
// session starts where the previous one stopped (the last event or
// bookmark it delivered); a 410 restarts from a fresh list, which the
// checkers see as a break in coverage.
func (w *Workload) watch(ctx context.Context, i int, res history.Resource, startRV uint64, rng *rand.Rand) {
	node := w.cfg.Endpoints[i].Name
	last := startRV
	for session := 1; ctx.Err() == nil; session++ {
		s := history.Session{Node: node, Resource: res, Session: session, StartRV: last, Started: w.rec.Now()}
		cut := time.Duration(float64(w.cfg.WatchCut) * (0.5 + rng.Float64()))
		wctx, cancel := context.WithTimeout(ctx, cut)
		end, next := w.watchOnce(wctx, i, res, session, last)
		cutByUs := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil {
			end = "run end"
		} else if cutByUs {
			end = "cut"
		}
		s.End, s.Ended = end, w.rec.Now()
		w.rec.session(s)
		last = next
		for end == "gone" && ctx.Err() == nil {
			if rv := w.relist(ctx, i, res); rv != 0 {
				last = rv
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if end != "cut" {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

func (w *Workload) watchOnce(ctx context.Context, i int, res history.Resource, session int, from uint64) (string, uint64) {
	opts := metav1.ListOptions{LabelSelector: w.selector(), ResourceVersion: strconv.FormatUint(from, 10), AllowWatchBookmarks: true}
	var wi watch.Interface
	var err error
	cs := w.clients[i]
	if res == history.CSRs {
		wi, err = cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, opts)
	} else {
		wi, err = cs.CoreV1().ConfigMaps(w.cfg.Namespace).Watch(ctx, opts)
	}
	if err != nil {
		if _, code, reason := outcome(err); code == http.StatusGone {
			return "gone", from
		} else {
			return "error: " + reason, from
		}
	}
	defer wi.Stop()
	last := from
	node := w.cfg.Endpoints[i].Name
	for {
		select {
		case <-ctx.Done():
			return "cut", last
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return "closed", last
			}
			if ev.Type == watch.Error {
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
					return "gone", last
				}
				return "error event", last
			}
			acc, err := apimeta.Accessor(ev.Object)
			if err != nil {
				return "error: " + err.Error(), last
			}
			e := history.Event{Node: node, Resource: res, Session: session, Type: history.EventType(ev.Type),
				RV: parseRV(acc.GetResourceVersion()), At: w.rec.Now()}
			if ev.Type != watch.Bookmark {
				e.Key = acc.GetName()
				switch o := ev.Object.(type) {
				case *corev1.ConfigMap:
					e.Value = o.Data["v"]
				case *certificatesv1.CertificateSigningRequest:
					e.Value, e.Approved = certDigest(o.Status.Certificate), approved(o)
				}
			}
			w.rec.event(e)
			if e.RV > last {
				last = e.RV
			}
		}
	}
}

// relist finds a new start after a 410: the current resourceVersion.
func (w *Workload) relist(ctx context.Context, i int, res history.Resource) uint64 {
	rctx, cancel := w.reqCtx(ctx)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: w.selector()}
	var rv string
	if res == history.CSRs {
		l, err := w.clients[i].CertificatesV1().CertificateSigningRequests().List(rctx, opts)
		if err != nil {
			return 0
		}
		rv = l.ResourceVersion
	} else {
		l, err := w.clients[i].CoreV1().ConfigMaps(w.cfg.Namespace).List(rctx, opts)
		if err != nil {
			return 0
		}
		rv = l.ResourceVersion
	}
	return parseRV(rv)
}
