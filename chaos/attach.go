package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// AttachNode is one node of a cluster the run attaches to: its admin
// kubeconfig, and the shell commands that kill it and bring it back (for
// a Helm install, "kubectl delete pod trustplane-0 --grace-period=0
// --force" and a command that waits for the pod to be recreated).
type AttachNode struct {
	Name       string
	Kubeconfig string
	Kill       string
	Restart    string
}

// Attached is a Target made of commands.
type Attached struct {
	nodes []AttachNode

	mu   sync.Mutex
	down map[string]bool // killed by the run and not restarted yet
}

// NewAttached checks that every kubeconfig loads.
func NewAttached(nodes []AttachNode) (*Attached, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("chaos: attach needs at least one node")
	}
	for _, n := range nodes {
		if _, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig); err != nil {
			return nil, fmt.Errorf("chaos: node %s: kubeconfig %s: %w", n.Name, n.Kubeconfig, err)
		}
	}
	return &Attached{nodes: nodes, down: map[string]bool{}}, nil
}

func (a *Attached) Names() []string {
	out := make([]string, len(a.nodes))
	for i, n := range a.nodes {
		out[i] = n.Name
	}
	return out
}

func (a *Attached) node(name string) (AttachNode, error) {
	for _, n := range a.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return AttachNode{}, fmt.Errorf("chaos: no node %q", name)
}

func (a *Attached) Config(name string) (*rest.Config, error) {
	n, err := a.node(name)
	if err != nil {
		return nil, err
	}
	return clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
}

// Kill runs the node's kill command (bounded to a minute).
func (a *Attached) Kill(name string) error {
	n, err := a.node(name)
	if err != nil {
		return err
	}
	if n.Kill == "" {
		return fmt.Errorf("chaos: node %s has no kill command", name)
	}
	a.mu.Lock()
	a.down[name] = true
	a.mu.Unlock()
	return runShell(n.Kill, time.Minute)
}

// Restart runs the node's restart command if the run killed it, then
// waits (up to three minutes) until the node answers /readyz.
func (a *Attached) Restart(ctx context.Context, name string) error {
	n, err := a.node(name)
	if err != nil {
		return err
	}
	a.mu.Lock()
	wasDown := a.down[name]
	delete(a.down, name)
	a.mu.Unlock()
	if wasDown && n.Restart != "" {
		if err := runShell(n.Restart, 3*time.Minute); err != nil {
			return err
		}
	}
	cfg, err := a.Config(name)
	if err != nil {
		return err
	}
	return waitReady(ctx, cfg, 3*time.Minute)
}

func runShell(command string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil {
		return fmt.Errorf("chaos: %q: %w (%s)", command, err, out)
	}
	return nil
}

// waitReady polls GET /readyz with the node's admin credentials.
func waitReady(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	hc.Timeout = 2 * time.Second
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := hc.Get(cfg.Host + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("chaos: %s not ready after %v", cfg.Host, timeout)
}
