package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fillPayload is the size of each fill object's payload: the issue's
// "1 KiB each".
const fillPayload = 1024

// fillName is the i-th fill object.
func fillName(i int) string { return fmt.Sprintf("fill-%07d", i) }

// fillKind is the kind of the i-th fill object: ServiceAccounts,
// ConfigMaps and Secrets in turn.
func fillKind(i int) string {
	return [...]string{"ServiceAccount", "ConfigMap", "Secret"}[i%3]
}

// fillDetail says what the fill result measured.
func fillDetail(c Config) string {
	return fmt.Sprintf("create one of %d stored objects (ServiceAccounts, ConfigMaps and Secrets in turn, %d B payload each), before the workloads; they stay until cleanup", c.Objects, fillPayload)
}

// runFill creates Objects objects in the fill namespace with every client
// in parallel, bounded by SetupTimeout, and returns it as the result
// "fill": its ops/s is the create rate as the store grows. An error means
// fewer objects are stored than asked for, so the run's figures would not
// be at that size; the caller stops.
func runFill(ctx context.Context, e *env) (WorkloadResult, error) {
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.SetupTimeout)
	defer cancel()
	if err := e.ensureNamespace(ctx, "fill"); err != nil {
		rec.failure(err)
		r := rec.result("fill", 0)
		r.Detail = fillDetail(e.cfg)
		return r, err
	}
	ns := e.ns("fill")
	e.prog.logf("filling %s with %d objects (bounded by --setup-timeout %s)", ns, e.cfg.Objects, e.cfg.SetupTimeout)
	payload := strings.Repeat("x", fillPayload)
	srvBefore, srvErr := e.sampleServer()
	start := time.Now()
	stop := e.prog.track("fill", rec, start, e.cfg.SetupTimeout)
	err := e.parallel(ctx, e.cfg.Objects, func(i int) error {
		t0 := time.Now()
		err := e.createFill(ctx, i, ns, payload)
		if err != nil {
			rec.failure(err)
			return err
		}
		rec.success(time.Since(t0))
		return nil
	})
	elapsed := time.Since(start)
	srvAfter, srvErr2 := e.sampleServer()
	stop()
	r := rec.result("fill", elapsed)
	r.Detail = fillDetail(e.cfg)
	e.recordServer(&r, srvBefore, srvAfter, errors.Join(srvErr, srvErr2), elapsed)
	if err != nil {
		return r, fmt.Errorf("%w: fill stored %d of %d objects: %v", ErrWorkloadFailed, r.Ops, e.cfg.Objects, err)
	}
	return r, nil
}

// createFill creates the i-th fill object, retried on the next clients
// like a seed.
func (e *env) createFill(ctx context.Context, i int, ns, payload string) error {
	name := fillName(i)
	meta := metav1.ObjectMeta{Name: name}
	kind := fillKind(i)
	return e.retryCreate(ctx, i, kind+" "+ns+"/"+name, func(ctx context.Context, client int) error {
		core := e.client(client).CoreV1()
		var err error
		switch kind {
		case "ServiceAccount":
			m := meta
			m.Annotations = map[string]string{"bench.trustplane.io/payload": payload}
			_, err = core.ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: m}, metav1.CreateOptions{})
		case "ConfigMap":
			_, err = core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"payload": payload}}, metav1.CreateOptions{})
		default:
			_, err = core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"payload": []byte(payload)}}, metav1.CreateOptions{})
		}
		return err
	})
}
