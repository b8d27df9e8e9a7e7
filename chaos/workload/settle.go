package workload

import (
	"context"
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/chaos/history"
)

// Final reads every node's own state (resourceVersion=0) until all nodes
// agree and every approved CSR is signed, or until timeout; it returns
// the last reading of each node. Agreement is waited for, not assumed:
// a node that restarted late may still be catching up.
func (w *Workload) Final(ctx context.Context, timeout time.Duration) map[string]history.State {
	deadline := time.Now().Add(timeout)
	var states map[string]history.State
	for {
		states = make(map[string]history.State, len(w.clients))
		pending := 0
		for i, e := range w.cfg.Endpoints {
			st, unsigned := w.readState(ctx, i)
			states[e.Name] = st
			pending += unsigned
		}
		if (pending == 0 && settled(states)) || time.Now().After(deadline) || ctx.Err() != nil {
			return states
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func settled(states map[string]history.State) bool {
	var first *history.State
	for _, s := range states {
		if s.Err != "" {
			return false
		}
		if first == nil {
			s := s
			first = &s
			continue
		}
		if !reflect.DeepEqual(first.ConfigMaps, s.ConfigMaps) || !reflect.DeepEqual(first.CSRs, s.CSRs) {
			return false
		}
	}
	return true
}

// readState reads node i's own state; unsigned counts the approved CSRs
// that are not signed yet, which settling waits for.
func (w *Workload) readState(ctx context.Context, i int) (st history.State, unsigned int) {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: w.selector(), ResourceVersion: "0"}
	cms, err := w.clients[i].CoreV1().ConfigMaps(w.cfg.Namespace).List(rctx, opts)
	if err != nil {
		return history.State{Err: err.Error()}, 0
	}
	st = history.State{RV: parseRV(cms.ResourceVersion), ConfigMaps: map[string]history.Item{}, CSRs: map[string]string{}}
	for _, c := range cms.Items {
		st.ConfigMaps[c.Name] = history.Item{Value: c.Data["v"], RV: parseRV(c.ResourceVersion)}
	}
	if w.cfg.CSRInterval > 0 {
		csrs, err := w.clients[i].CertificatesV1().CertificateSigningRequests().List(rctx, opts)
		if err != nil {
			return history.State{Err: fmt.Sprintf("listing CSRs: %v", err)}, 0
		}
		for _, c := range csrs.Items {
			d := certDigest(c.Status.Certificate)
			if d == "" && approved(&c) {
				unsigned++
			}
			st.CSRs[c.Name] = d
		}
	}
	return st, unsigned
}
