package main

import (
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/utils/clock"
)

// The node's lifecycle around its health endpoints, as kube-apiserver's:
//
//   - --livez-grace-period: for that long after the start, /livez reports
//     its checks as passing whatever they say, so that a liveness probe
//     does not restart a node that is still starting (kube wraps its livez
//     checks the same way, delayedLivezCheck).
//   - --shutdown-delay-duration: on the first SIGTERM or SIGINT, /readyz
//     fails at once (its "shutdown" check) while the node keeps serving
//     every request, /livez and /healthz included, for the delay; then it
//     stops serving, ending its watches cleanly. A second signal ends the
//     delay early.

// delayedChecks wraps checks so that each passes until grace has passed
// since now.
func delayedChecks(grace time.Duration, clk clock.PassiveClock, checks ...healthz.HealthChecker) []healthz.HealthChecker {
	if grace <= 0 {
		return checks
	}
	from := clk.Now().Add(grace)
	out := make([]healthz.HealthChecker, len(checks))
	for i, c := range checks {
		out[i] = delayedCheck{check: c, from: from, clock: clk}
	}
	return out
}

type delayedCheck struct {
	check healthz.HealthChecker
	from  time.Time
	clock clock.PassiveClock
}

func (c delayedCheck) Name() string { return c.check.Name() }

func (c delayedCheck) Check(req *http.Request) error {
	if c.clock.Now().Before(c.from) {
		return nil
	}
	return c.check.Check(req)
}

// delayShutdown keeps the node serving for delay after the first signal,
// with /readyz already failing, so that load balancers drain it. A second
// signal ends the delay; so does the server failing (its error is
// returned).
func delayShutdown(log *slog.Logger, delay time.Duration, serveErr <-chan error) error {
	if delay <= 0 {
		return nil
	}
	log.Info("serving on while /readyz fails", "shutdown-delay-duration", delay)
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(again)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-again:
		log.Info("a second signal: the shutdown delay ends early")
	case err := <-serveErr:
		return err
	}
	return nil
}
