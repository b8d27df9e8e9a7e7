package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/chaos/report"
)

// rotationRoots are the trust roots the "rotate" fault rotates, one per
// injection, in turn. A root the cluster does not rotate online (404), or
// cannot now (no encryption configuration), is skipped.
var rotationRoots = []string{"signing-key", "node-ca", "encryption-key", "gossip-key", "cluster-ca", "signer-ca-kubelet-serving"}

// rotationPlans are what an injection does with its root, in turn per
// root: a whole rotation (the run's first one with the leader killed
// right after promote), an abort after start, an abort after promote.
var rotationPlans = []string{"rotate", "abort-after-start", "abort-after-promote"}

// errRotateSkipped: the root cannot be rotated on this cluster.
var errRotateSkipped = errors.New("not rotated online here")

// stepTimeout bounds how long a step is retried while the cluster is not
// ready for it (voters applying the last step, nodes reissuing).
const stepTimeout = 90 * time.Second

// rotateOnce rotates one root under the workload (the "rotate" fault): the
// steps go over the API of a node other than the one killed, and each is
// retried while the cluster refuses it as not ready (409) or unavailable.
// A finish that only a --force would take now (a signing key's tokens
// still valid, an encryption key's history not yet compacted) is forced:
// the run cannot wait that long, and what it invalidates is named.
func (n *nemesis) rotateOnce(ctx context.Context, f *report.Fault) error {
	before, changesBefore := n.mon.term(), n.mon.Changes()
	gossip, killed := n.watchGossip(ctx), ""
	defer func() {
		f.Elections = int(n.mon.term() - before)
		f.LeaderChanges = n.mon.Changes() - changesBefore
		f.Flaps = gossip.flaps(killed)
	}()
	i := n.rotations
	n.rotations++
	root := rotationRoots[i%len(rotationRoots)]
	plan := rotationPlans[(i/len(rotationRoots))%len(rotationPlans)]
	f.Node = root + " " + plan
	f.Start = n.now()
	killAfterPromote := plan == "rotate" && !n.killedInRotation
	via := n.t.Names()[0]
	step := func(s string, force bool) error {
		return n.rotationStep(ctx, via, root, s, force)
	}
	var probe *clusterCAProbe
	if root == "cluster-ca" {
		var err error
		if probe, err = newClusterCAProbe(n, via); err != nil {
			return err
		}
	}
	if err := step("start", false); err != nil {
		if errors.Is(err, errRotateSkipped) {
			f.Node += " (skipped: " + err.Error() + ")"
			return nil
		}
		return err
	}
	if plan == "abort-after-start" {
		if err := step("abort", false); err != nil {
			return err
		}
		return probe.after(ctx, plan)
	}
	if err := step("promote", false); err != nil {
		return err
	}
	if err := probe.promoted(ctx, via); err != nil {
		return err
	}
	if killAfterPromote {
		n.killedInRotation = true
		leader := n.mon.currentLeader()
		if leader != "" {
			f.Leader, killed = true, leader
			via = n.followerOf(leader)
			if err := n.t.Kill(leader); err != nil {
				return err
			}
			n.wait(ctx, 3*time.Second)
			if err := n.t.Restart(context.Background(), leader); err != nil {
				return err
			}
		}
	}
	if plan == "abort-after-promote" {
		if err := step("abort", false); err != nil {
			return err
		}
	}
	if err := step("finish", false); err != nil {
		return err
	}
	return probe.after(ctx, plan)
}

// rotationStep takes one step, retrying while it is refused as not ready
// or the node cannot answer, until stepTimeout; a refusal that names
// --force is forced after a few tries.
func (n *nemesis) rotationStep(ctx context.Context, via, root, step string, force bool) error {
	deadline := time.Now().Add(stepTimeout)
	tries := 0
	for {
		tries++
		code, body, err := n.postStep(ctx, via, root, step, force)
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case code == http.StatusNotFound:
			return fmt.Errorf("%w: %s", errRotateSkipped, root)
		case code == http.StatusConflict && step == "start" && strings.Contains(body, "encryption-provider-config"):
			return fmt.Errorf("%w: %s", errRotateSkipped, strings.TrimSpace(body))
		case code == http.StatusConflict && strings.Contains(body, "--force") && tries >= 3:
			force = true
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%d: %s", code, strings.TrimSpace(body))
			}
			return fmt.Errorf("%s %s: %w", root, step, err)
		}
		time.Sleep(time.Second)
	}
}

// postStep posts one step to node name's API.
func (n *nemesis) postStep(ctx context.Context, name, root, step string, force bool) (int, string, error) {
	cfg, err := n.t.Config(name)
	if err != nil {
		return 0, "", err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, "", err
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/debug/trustplane/rotate/" + root + "/" + step
	if force {
		url += "?force=true"
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK && !json.Valid(b) {
		return resp.StatusCode, string(b), errors.New("the answer is not JSON")
	}
	return resp.StatusCode, string(b), nil
}

// rotationCheck is the check of the run's rotations: every rotate fault
// took its steps (or was skipped as not rotatable here).
func rotationCheck(faults []report.Fault) report.Check {
	c := report.Check{Name: "rotation", OK: true}
	ran := 0
	for _, f := range faults {
		if f.Name != "rotate" {
			continue
		}
		ran++
		switch {
		case f.Err != "":
			c.OK = false
			c.Violations = append(c.Violations, f.Node+": "+f.Err)
		case len(f.Flaps) > 0:
			c.OK = false
			c.Violations = append(c.Violations, fmt.Sprintf("%s: gossip flapped during the rotation: %v", f.Node, f.Flaps))
		case f.Leader && f.LeaderChanges > 1:
			// The election of the leader it killed may take more than
			// one round (a split vote), but it elects one leader.
			c.OK = false
			c.Violations = append(c.Violations, fmt.Sprintf("%s: the leader changed %d times during the rotation (once for its leader kill)", f.Node, f.LeaderChanges))
		case !f.Leader && f.Elections > 0:
			c.OK = false
			c.Violations = append(c.Violations, fmt.Sprintf("%s: the raft term rose by %d during the rotation: an election", f.Node, f.Elections))
		default:
			c.Info = append(c.Info, f.Node)
		}
	}
	if ran == 0 {
		c.Skipped = "no rotation in this run"
	}
	return c
}
