package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/trustplane/trustplane/chaos/report"
)

// Faults lists every fault the nemesis knows, in the order it cycles
// through them.
var Faults = []string{"kill", "leader-kill", "rotate", "partition", "pause", "one-way", "rolling", "delay", "slow-disk", "full-disk"}

// errUnsupported: the target cannot cause this fault.
var errUnsupported = errors.New("the target cannot cause this fault")

// nemesis injects one fault at a time and undoes it, then waits until
// every node is ready again before the next: the run tests recovery from
// each fault, not an ever-growing pile of them.
type nemesis struct {
	t   Target
	mon *monitor
	rng *rand.Rand
	now func() int64
	// hold scales how long each fault lasts.
	hold float64
	// rotations counts the rotate faults injected (rotate.go), and
	// killedInRotation says whether one has killed the leader yet.
	rotations        int
	killedInRotation bool
}

// supported reports whether the target can cause the fault.
func (n *nemesis) supported(name string) bool {
	switch name {
	case "kill", "leader-kill":
		return true
	case "rolling", "rotate":
		return true
	case "pause":
		_, ok := n.t.(pauser)
		return ok
	case "partition", "one-way", "delay":
		_, ok := n.t.(partitioner)
		return ok
	case "slow-disk", "full-disk":
		d, ok := n.t.(disks)
		return ok && d.Failpoints()
	}
	return false
}

func (n *nemesis) pick(leader bool) (string, bool) {
	names := n.t.Names()
	l := n.mon.currentLeader()
	if leader && l != "" {
		return l, true
	}
	name := names[n.rng.Intn(len(names))]
	return name, name == l
}

func (n *nemesis) followerOf(leader string) string {
	var out []string
	for _, name := range n.t.Names() {
		if name != leader {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return leader
	}
	return out[n.rng.Intn(len(out))]
}

// wait holds a fault for d scaled by hold; the run ending cuts it short,
// but the fault is always undone by the caller.
func (n *nemesis) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(float64(d) * n.hold)):
	}
}

// inject causes the named fault, holds it, undoes it and waits for the
// cluster to recover. Undoing does not depend on ctx: a fault is never
// left in place.
func (n *nemesis) inject(ctx context.Context, name string) report.Fault {
	f := report.Fault{Name: name, Start: n.now()}
	err := n.cause(ctx, name, &f)
	f.Healed = n.now()
	if rerr := n.recover(); rerr != nil && err == nil {
		err = rerr
	}
	f.Recovered = n.now()
	if err != nil {
		f.Err = err.Error()
	}
	// Ready is not enough: a follower that hears heartbeats and gets no
	// entries is ready and stays behind. Undoing does not depend on ctx,
	// and neither does this wait, which is bounded.
	if f.Behind = n.mon.awaitCatchUp(catchUpWithin); f.Behind == "" {
		f.CaughtUp = n.now()
	}
	return f
}

func (n *nemesis) cause(ctx context.Context, name string, f *report.Fault) error {
	switch name {
	case "rotate":
		return n.rotateOnce(ctx, f)
	case "kill", "leader-kill":
		f.Node, f.Leader = n.pick(name == "leader-kill")
		f.Start = n.now()
		if err := n.t.Kill(f.Node); err != nil {
			return err
		}
		n.wait(ctx, 5*time.Second)
		return n.t.Restart(context.Background(), f.Node)
	case "rolling":
		f.Node = "all"
		// Followers first and the leader last, as a rollout does.
		l := n.mon.currentLeader()
		order := []string{}
		for _, name := range n.t.Names() {
			if name != l {
				order = append(order, name)
			}
		}
		if l != "" {
			order = append(order, l)
		}
		for _, name := range order {
			var err error
			if s, ok := n.t.(gracefulStopper); ok {
				err = s.Stop(name)
			} else {
				err = n.t.Kill(name)
			}
			if err != nil {
				return err
			}
			if err := n.t.Restart(context.Background(), name); err != nil {
				return err
			}
		}
		return nil
	case "pause":
		p, ok := n.t.(pauser)
		if !ok {
			return errUnsupported
		}
		f.Node, f.Leader = n.pick(n.rng.Intn(2) == 0)
		f.Start = n.now()
		if err := p.Pause(f.Node); err != nil {
			return err
		}
		n.wait(ctx, 8*time.Second)
		return p.Resume(f.Node)
	case "partition", "one-way", "delay":
		p, ok := n.t.(partitioner)
		if !ok {
			return errUnsupported
		}
		defer p.Heal()
		switch name {
		case "partition":
			f.Node, f.Leader = n.pick(n.rng.Intn(2) == 0)
			f.Start = n.now()
			if err := p.Isolate(f.Node); err != nil {
				return err
			}
			// Longer than --max-stale-read, so the isolated node must stop
			// serving its own state while the workload still reads it.
			n.wait(ctx, 10*time.Second)
		case "one-way":
			l := n.mon.currentLeader()
			to := n.followerOf(l)
			f.Node, f.Leader = fmt.Sprintf("%s->%s", l, to), true
			f.Start = n.now()
			if err := p.OneWay(l, to); err != nil {
				return err
			}
			n.wait(ctx, 8*time.Second)
		case "delay":
			f.Node, f.Leader = n.pick(n.rng.Intn(2) == 0)
			f.Start = n.now()
			if err := p.Delay(f.Node, 100*time.Millisecond); err != nil {
				return err
			}
			n.wait(ctx, 10*time.Second)
		}
		return nil
	case "slow-disk", "full-disk":
		d, ok := n.t.(disks)
		if !ok || !d.Failpoints() {
			return errUnsupported
		}
		f.Node, f.Leader = n.pick(n.rng.Intn(2) == 0)
		f.Start = n.now()
		defer d.HealDisk(f.Node)
		if name == "slow-disk" {
			if err := d.SlowDisk(f.Node, 200*time.Millisecond); err != nil {
				return err
			}
			n.wait(ctx, 10*time.Second)
			return nil
		}
		if err := d.FullDisk(f.Node); err != nil {
			return err
		}
		n.wait(ctx, 8*time.Second)
		return nil
	}
	return fmt.Errorf("chaos: unknown fault %q", name)
}

// recover undoes whatever may be left (a partition, a paused or stopped
// node, a disk fault) and waits until every node is ready.
func (n *nemesis) recover() error {
	if p, ok := n.t.(partitioner); ok {
		p.Heal()
	}
	var first error
	for _, name := range n.t.Names() {
		if p, ok := n.t.(pauser); ok {
			p.Resume(name)
		}
		if d, ok := n.t.(disks); ok && d.Failpoints() {
			d.HealDisk(name)
		}
		if err := n.t.Restart(context.Background(), name); err != nil && first == nil {
			first = err
		}
	}
	return first
}
