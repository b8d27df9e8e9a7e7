package chaos

import (
	"context"
	"time"

	"k8s.io/client-go/rest"
)

// Target is the cluster a run hurts. Both modes provide it: local starts
// its own processes, attach drives a cluster through commands.
type Target interface {
	// Names lists the nodes; the first is where the run's setup goes.
	Names() []string
	// Config is an admin client configuration for one node.
	Config(name string) (*rest.Config, error)
	// Kill ends a node abruptly, without any chance to clean up: the fault
	// that proves acknowledged writes were on disk.
	Kill(name string) error
	// Restart brings a killed or stopped node back on its own data and
	// returns once it is ready, so the next fault starts from a whole
	// cluster.
	Restart(ctx context.Context, name string) error
}

// The faults a target can cause beyond kill and restart. Each is an
// optional interface: the nemesis offers only what the target has.
type (
	gracefulStopper interface {
		// Stop ends a node the way an operator or a rollout does
		// (SIGTERM), to prove that a planned restart loses nothing either.
		Stop(name string) error
	}
	pauser interface {
		// Pause freezes a node without closing its sockets (SIGSTOP): the
		// GC-pause or VM-stall case, where peers see silence, not a reset.
		Pause(name string) error
		Resume(name string) error
	}
	partitioner interface {
		// Isolate, OneWay and Delay change the network between nodes
		// only; clients still reach every node, which is what makes a
		// partitioned node's answers worth checking.
		Isolate(name string) error
		OneWay(from, to string) error
		Delay(name string, d time.Duration) error
		Heal()
	}
	disks interface {
		// Failpoints reports whether the disk faults can be caused at
		// all (the binary needs -tags failpoints).
		Failpoints() bool
		SlowDisk(name string, d time.Duration) error
		FullDisk(name string) error
		HealDisk(name string) error
	}
)
