package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Run measures every configured workload, one after another, against the
// configured kubeconfigs, and deletes what it created.
//
// The result is returned whenever the servers were reached, even with an
// error: ErrWorkloadFailed when a workload had no successful operation,
// ErrCleanup when something could not be deleted, ctx's error when the run
// was interrupted (the workloads run so far are in the result). Without a
// result the error is ErrConfig or ErrUnreachable, and nothing was
// created.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prog := newProgress(cfg)
	if len(cfg.ServerPIDs) > 0 {
		if _, err := sampleProcs(cfg.procDir, cfg.ServerPIDs); err != nil {
			return nil, err
		}
	}
	eps, err := loadEndpoints(cfg.Kubeconfigs)
	if err != nil {
		return nil, err
	}
	environment, err := probe(ctx, eps, cfg)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(cfg, eps, prog)
	if err != nil {
		return nil, err
	}
	if err := e.warmUp(ctx); err != nil {
		return nil, err
	}
	res := &Result{Format: resultFormat, Environment: environment}
	prog.logf("run %s: server %s, %d endpoint(s), %d client(s), %s per workload; objects in namespaces %s*",
		e.runID, environment.ServerVersion, len(environment.Endpoints), cfg.Clients, cfg.Duration, e.ns(""))

	var failed []string
	var fillErr error
	if cfg.Objects > 0 {
		wr, err := runFill(ctx, e)
		res.Workloads = append(res.Workloads, wr)
		fillErr = err
	}
	for _, name := range cfg.Workloads {
		if ctx.Err() != nil || fillErr != nil {
			break
		}
		wr := runWorkload(ctx, e, lookup(name))
		res.Workloads = append(res.Workloads, wr)
		if wr.Failed() {
			failed = append(failed, name)
		}
	}
	e.close()
	if len(cfg.ServerPIDs) > 0 {
		if s, err := sampleProcs(cfg.procDir, cfg.ServerPIDs); err != nil {
			prog.logf("server memory: %v", err)
		} else {
			res.Server = &ServerSummary{PIDs: cfg.ServerPIDs, PeakRSSBytes: s.hwm, RSSBytes: s.rss}
		}
	}
	errs := []error{fillErr}
	if ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("bench: interrupted: %w", ctx.Err()))
	}
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s had no successful operation", ErrWorkloadFailed, strings.Join(failed, ", ")))
	}
	if cfg.Keep {
		e.prog.logf("keeping what the run created (--keep): namespaces labelled %s=%s", RunLabel, e.runID)
	} else if err := cleanup(e); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// runWorkload prepares w (bounded by SetupTimeout), then runs it for the
// configured duration. A failed preparation is the workload's one error.
func runWorkload(ctx context.Context, e *env, w *workload) WorkloadResult {
	rec := newRecorder()
	pctx, cancel := context.WithTimeout(ctx, e.cfg.SetupTimeout)
	l, err := w.prepare(pctx, e)
	cancel()
	if err != nil {
		e.prog.logf("%s: preparation failed: %v", w.name, err)
		rec.failure(fmt.Errorf("preparing: %w", err))
		r := rec.result(w.name, 0)
		r.Detail = w.detail(e.cfg)
		return r
	}
	srvBefore, srvErr := e.sampleServer()
	start, cpu := time.Now(), processCPU()
	stop := e.prog.track(w.name, rec, start, e.cfg.Duration)
	l.run(ctx, start.Add(e.cfg.Duration), rec)
	elapsed, cpu := time.Since(start), processCPU()-cpu
	srvAfter, srvErr2 := e.sampleServer()
	stop()
	r := rec.result(w.name, elapsed)
	if cpu > 0 && elapsed > 0 {
		r.ClientCores = cpu.Seconds() / elapsed.Seconds()
	}
	e.recordServer(&r, srvBefore, srvAfter, errors.Join(srvErr, srvErr2), elapsed)
	r.Detail = w.detail(e.cfg)
	if d, ok := l.(interface{ detail() string }); ok && d.detail() != "" {
		r.Detail = d.detail()
	}
	return r
}

// recordServer fills r's server figures from the samples around its timed
// phase, or says why there are none.
func (e *env) recordServer(r *WorkloadResult, before, after procSample, err error, elapsed time.Duration) {
	switch {
	case err != nil:
		e.prog.logf("%s: no server figures: %v", r.Name, err)
	case len(e.cfg.ServerPIDs) > 0:
		serverFigures(r, before, after, elapsed)
	}
}

// sampleServer samples the server processes; the zero sample when none
// were given.
func (e *env) sampleServer() (procSample, error) {
	if len(e.cfg.ServerPIDs) == 0 {
		return procSample{}, nil
	}
	return sampleProcs(e.cfg.procDir, e.cfg.ServerPIDs)
}

// warmUp has every client ask for /version once, so that each has its
// connection (TLS handshake done) before the first workload's clock
// starts, and so that a client that cannot connect fails the run before
// anything is created.
func (e *env) warmUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return e.parallel(ctx, len(e.clients), func(i int) error {
		if _, err := e.client(i).Discovery().RESTClient().Get().AbsPath("/version").DoRaw(ctx); err != nil {
			return fmt.Errorf("%w: client %d (%s): %v", ErrUnreachable, i, e.eps[i%len(e.eps)].rest.Host, err)
		}
		return nil
	})
}
