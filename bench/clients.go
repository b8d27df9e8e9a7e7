package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// probeTimeout bounds each endpoint's /version probe, so that an
// unreachable server fails the run quickly.
const probeTimeout = 10 * time.Second

// endpoint is one kubeconfig and the configuration loaded from it.
type endpoint struct {
	kubeconfig string
	rest       *rest.Config
}

// loadEndpoints reads every kubeconfig.
func loadEndpoints(paths []string) ([]endpoint, error) {
	var out []endpoint
	for _, p := range paths {
		cfg, err := clientcmd.BuildConfigFromFlags("", p)
		if err != nil {
			return nil, fmt.Errorf("%w: kubeconfig %s: %v", ErrUnreachable, p, err)
		}
		out = append(out, endpoint{kubeconfig: p, rest: cfg})
	}
	return out, nil
}

// clientFor builds the clientset of one bench client: no client-side rate
// limit unless configured, the chosen content type, and a connection of
// its own (a Dial function keeps client-go from sharing the cached
// transport, and so one TCP connection, between clients).
func clientFor(ep endpoint, c Config) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(ep.rest)
	cfg.QPS, cfg.Burst = c.QPS, c.Burst
	if c.Protobuf {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	cfg.UserAgent = "trustplane-bench"
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = dialer.DialContext
	return kubernetes.NewForConfig(cfg)
}

// probe asks every endpoint for /version and describes the environment.
// The first endpoint's answer names the server.
func probe(ctx context.Context, eps []endpoint, c Config) (Environment, error) {
	env := Environment{
		Tool: c.Tool, Clients: c.Clients, Flags: c.Flags,
		Start: time.Now().UTC().Truncate(time.Second),
		Machine: Machine{
			GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(),
		},
	}
	env.Machine.Hostname, _ = os.Hostname()
	seen := map[string]bool{}
	var first kubernetes.Interface
	for _, ep := range eps {
		cfg := rest.CopyConfig(ep.rest)
		cfg.Timeout = probeTimeout
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return env, fmt.Errorf("%w: kubeconfig %s: %v", ErrUnreachable, ep.kubeconfig, err)
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return env, fmt.Errorf("%w: %s (kubeconfig %s): %v", ErrUnreachable, ep.rest.Host, ep.kubeconfig, err)
		}
		if first == nil {
			first = cs
			env.ServerVersion = v.GitVersion
			if strings.Contains(v.GitVersion, "trustplane") {
				env.TrustplaneVersion = v.GitVersion
			}
		}
		if !seen[ep.rest.Host] {
			seen[ep.rest.Host] = true
			env.Endpoints = append(env.Endpoints, ep.rest.Host)
		}
	}
	env.Nodes = len(env.Endpoints)
	if env.TrustplaneVersion != "" {
		if n := trustplaneMembers(ctx, first); n > 0 {
			env.Nodes = n
		}
	}
	return env, nil
}

// trustplaneMembers counts the cluster's members through trustplane's
// operator endpoint; 0 when it cannot tell (not allowed, not served).
func trustplaneMembers(ctx context.Context, cs kubernetes.Interface) int {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/trustplane/members").DoRaw(ctx)
	if err != nil {
		return 0
	}
	var members []json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return 0
	}
	return len(members)
}
