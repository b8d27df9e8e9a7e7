package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
)

// eventFlags are the flags of Events (core v1 and events.k8s.io/v1).
type eventFlags struct {
	// ttl is kube-apiserver's --event-ttl, in whole seconds as kube takes
	// it; 0 keeps events until they are deleted.
	ttl time.Duration
}

func (e *eventFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&e.ttl, "event-ttl", registry.DefaultEventTTL, "amount of time to retain events: an event is deleted this long after its last write (kube-apiserver's flag; whole seconds, 0 keeps them)")
}

// check refuses what kube-apiserver cannot take, and rounds the TTL down to
// whole seconds as kube's storage does.
func (e *eventFlags) check() error {
	if e.ttl < 0 {
		return fmt.Errorf("--event-ttl %s: must not be negative", e.ttl)
	}
	e.ttl = e.ttl.Truncate(time.Second)
	return nil
}

// resources are the two Event resources, with the TTL.
func (e *eventFlags) resources() []*registry.Resource { return registry.EventResources(e.ttl) }

// runEventExpiry deletes expired events (storage.Expiry) while this node
// leads, one term per leadership like the controllers, but whether or not
// they run: kube-apiserver's storage expires events, not a controller. It
// returns once ctx ended and the last term stopped.
func runEventExpiry(ctx context.Context, log *slog.Logger, lead controllers.Leadership, stor *storage.Storage) {
	log = log.With("component", "event-ttl")
	mcfg := controllers.DefaultConfig()
	mcfg.Leadership = lead
	mcfg.Runner = stor.Expiry(nil)
	mcfg.Logger = log
	mcfg.Name = "event expiry"
	m, err := controllers.New(mcfg)
	if err != nil {
		log.Error("events do not expire", "error", err)
		return
	}
	m.Run(ctx)
}
