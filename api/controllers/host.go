package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The controllers' lease: kube-controller-manager's own, since these are
// its controllers, in its namespace and under its name, which kube's
// bootstrap policy lets system:kube-controller-manager create, get and
// update. A kube-controller-manager run against the cluster with its
// default lease therefore takes turns with them rather than running the
// same controllers beside them.
const (
	LeaseNamespace = "kube-system"
	LeaseName      = "kube-controller-manager"
)

// Stand says whether this node may hold the controllers' lease now
// (cluster.Node.StandsForControllers is the rule).
type Stand interface {
	StandsForControllers() bool
}

// HostConfig configures a Host.
type HostConfig struct {
	// Stand says when this node may hold the lease.
	Stand Stand
	// Client makes the clientset the lease is read and written with,
	// through this node's own API as system:kube-controller-manager. It is
	// called for each campaign; close ends that clientset's connections.
	Client func() (cs kubernetes.Interface, close func(), err error)
	// Identity is the lease's holder identity: the node's name.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings: a holder that cannot renew for RenewDeadline stops
	// its controllers; the others take the lease LeaseDuration after they
	// last saw it renewed. Their difference is the margin against two
	// holders' terms overlapping.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// PollInterval is how often Stand is asked while campaigning or
	// holding: the longest a node keeps the lease after it stopped
	// standing.
	PollInterval time.Duration
	// Logger receives acquisitions and losses; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultHostConfig returns the default timings; Stand, Client and
// Identity must still be set. They are shorter than kube-controller-
// manager's 15 s, 10 s and 2 s: a host that dies leaves CSRs unsigned and
// namespaces undeleted until another takes the lease, and every node here
// renews through the same replicated log rather than a remote etcd.
func DefaultHostConfig() *HostConfig {
	return &HostConfig{LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second, PollInterval: 250 * time.Millisecond}
}

// Host is the Leadership of the controllers' Manager: true while this node
// holds the controllers' lease. Run campaigns for it while the node stands
// (Stand), and gives it up, released at once, when the node stops
// standing, so another takes it within a RetryPeriod.
type Host struct {
	cfg     HostConfig
	log     *slog.Logger
	holding atomic.Bool
}

// NewHost returns a Host for cfg.
func NewHost(cfg *HostConfig) (*Host, error) {
	switch {
	case cfg == nil || cfg.Stand == nil || cfg.Client == nil || cfg.Identity == "":
		return nil, fmt.Errorf("%w: a Host needs Stand, Client and Identity", ErrInvalidConfig)
	case cfg.PollInterval <= 0 || cfg.RetryPeriod <= 0 || cfg.RenewDeadline <= cfg.RetryPeriod || cfg.LeaseDuration <= cfg.RenewDeadline:
		return nil, fmt.Errorf("%w: Host timings: want 0 < RetryPeriod < RenewDeadline < LeaseDuration and PollInterval > 0", ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Host{cfg: *cfg, log: log}, nil
}

// lost records that this node no longer holds the lease (once).
func (h *Host) lost() {
	if h.holding.Swap(false) {
		h.log.Info("gave up the controllers' lease", "lease", LeaseNamespace+"/"+LeaseName)
	}
}

// IsLeader reports whether this node holds the controllers' lease.
func (h *Host) IsLeader() bool { return h.holding.Load() }

// Run campaigns while the node stands, until ctx ends.
func (h *Host) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if !h.cfg.Stand.StandsForControllers() {
			select {
			case <-ctx.Done():
			case <-time.After(h.cfg.PollInterval):
			}
			continue
		}
		if err := h.campaign(ctx); err != nil {
			h.log.Error("cannot stand for the controllers' lease", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(h.cfg.RetryPeriod):
			}
		}
	}
}

// campaign runs one leader election until the node stops standing, the
// lease is lost, or ctx ends.
func (h *Host) campaign(ctx context.Context) error {
	cs, closeClient, err := h.cfg.Client()
	if err != nil {
		return err
	}
	defer closeClient()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: LeaseNamespace, Name: LeaseName},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: h.cfg.Identity},
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Standing ends the campaign when it stops; the release that follows
	// (ReleaseOnCancel) hands the lease over without its running out.
	go func() {
		wait.Until(func() {
			if !h.cfg.Stand.StandsForControllers() {
				cancel()
			}
		}, h.cfg.PollInterval, cctx.Done())
	}()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   h.cfg.LeaseDuration,
		RenewDeadline:   h.cfg.RenewDeadline,
		RetryPeriod:     h.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go starts this in a goroutine that may run after
			// the lease is already lost: holding is true only until
			// lctx, which ends with the lease, is done.
			OnStartedLeading: func(lctx context.Context) {
				if lctx.Err() == nil {
					h.holding.Store(true)
					h.log.Info("holding the controllers' lease", "lease", LeaseNamespace+"/"+LeaseName)
				}
				<-lctx.Done()
				h.lost()
			},
			OnStoppedLeading: h.lost,
		},
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	le.Run(cctx)
	return nil
}
