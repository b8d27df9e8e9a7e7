package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/trustplane/trustplane/chaos"
	"github.com/trustplane/trustplane/chaos/history"
	"github.com/trustplane/trustplane/chaos/local"
	"github.com/trustplane/trustplane/chaos/report"
)

// errChaosFailed makes "trustplane chaos" exit non-zero when the verdict
// is not PASS, so scripts and CI can rely on the status.
var errChaosFailed = errors.New("chaos: the run did not pass")

// chaosCmd implements "trustplane chaos local|attach|check".
func chaosCmd(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: trustplane chaos local|attach|check [flags] (see docs/CHAOS.md)")
	}
	mode, args := args[0], args[1:]
	fs := flag.NewFlagSet("chaos "+mode, flag.ContinueOnError)
	var (
		duration  = fs.Duration("duration", 3*time.Minute, "how long the workload and the faults run")
		faults    = fs.String("faults", "", "comma-separated faults to cycle through (default: every one the target supports): "+strings.Join(chaos.Faults, ","))
		clients   = fs.Int("clients", 8, "concurrent writer/reader clients")
		keys      = fs.Int("keys", 8, "ConfigMap keys the clients share")
		csrEvery  = fs.Duration("csr-interval", 2*time.Second, "pause between CSR creations (0: no CSRs)")
		tokEvery  = fs.Duration("token-interval", time.Second, "pause between ServiceAccount tokens minted, reviewed and verified with the JWKS (0: no tokens)")
		timeout   = fs.Duration("request-timeout", 10*time.Second, "client timeout per request")
		out       = fs.String("out", "chaos-report", "directory for history.json, report.txt and linearizability visualisations")
		seed      = fs.Int64("seed", 0, "random seed (0: from the clock); the report prints it")
		hold      = fs.Float64("hold", 1, "scales how long each fault is held")
		quiet     = fs.Duration("quiet", 5*time.Second, "pause between two faults")
		maxStale  = fs.Duration("max-stale-read", 5*time.Second, "the servers' --max-stale-read, which resourceVersion=0 reads are checked against")
		checkTime = fs.Duration("check-timeout", 2*time.Minute, "bound on the linearizability search")
		// local mode
		nodes = fs.Int("nodes", 3, "local: cluster size (voters)")
		reps  = fs.Int("replicas", 0, "local: read replicas (--role replica) beside the voters, which the faults and the workload treat as any node")
		bin   = fs.String("bin", "", "local: trustplane binary to run (default: this one)")
		data  = fs.String("data", "", "local: directory for the nodes' data (default: a new temporary directory, removed after a PASS)")
		execW = fs.String("execute-writes", "", "local: the nodes' --execute-writes, leader or local (default: the server's default)")
		enc   = fs.Bool("encrypt-at-rest", true, "local: give the nodes an encryption configuration for Secrets, so the rotate fault rotates the encryption key too")
		// attach mode
		kubeconfigs = mapFlag{}
		kills       = mapFlag{}
		restarts    = mapFlag{}
		historyFile = fs.String("history", "", "check: history.json of an earlier run")
	)
	fs.Var(kubeconfigs, "kubeconfig", "attach: NODE=PATH, an admin kubeconfig per node (repeat)")
	fs.Var(kills, "kill", "attach: NODE=COMMAND that kills the node, run with sh -c (repeat)")
	fs.Var(restarts, "restart", "attach: NODE=COMMAND that brings it back, run with sh -c (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cfg := chaos.Config{
		Mode: mode, Duration: *duration, Quiet: *quiet, Hold: *hold, MaxStaleRead: *maxStale,
		Out: *out, Progress: os.Stderr, Seed: *seed, CheckTimeout: *checkTime,
	}
	if *seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	cfg.Workload.Clients, cfg.Workload.Keys, cfg.Workload.CSRInterval, cfg.Workload.Timeout = *clients, *keys, *csrEvery, *timeout
	cfg.Workload.TokenInterval = *tokEvery

	switch mode {
	case "check":
		if *historyFile == "" {
			return errors.New("chaos check: --history is required")
		}
		f, err := os.Open(*historyFile)
		if err != nil {
			return err
		}
		h, err := history.Read(f)
		f.Close()
		if err != nil {
			return err
		}
		// The run's fault record, when it wrote one, lets the rotation
		// and catch-up checks be judged again.
		var rec *report.Recorded
		if f, err := os.Open(filepath.Join(filepath.Dir(*historyFile), report.FaultsFile)); err == nil {
			r, err := report.ReadRecorded(f)
			f.Close()
			if err != nil {
				return err
			}
			rec = &r
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		r, err := chaos.Check(h, cfg, rec)
		if err != nil {
			return err
		}
		return finish(r)
	case "local":
		self := *bin
		if self == "" {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			self = exe
		}
		dir := *data
		removeAfter := false
		if dir == "" {
			d, err := os.MkdirTemp("", "trustplane-chaos-")
			if err != nil {
				return err
			}
			dir, removeAfter = d, true
		}
		fmt.Fprintf(os.Stderr, "chaos: seed %d; starting %d nodes and %d read replicas in %s\n", cfg.Seed, *nodes, *reps, dir)
		nodeArgs := []string{"--max-stale-read", maxStale.String()}
		if *execW != "" {
			nodeArgs = append(nodeArgs, "--execute-writes", *execW)
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		c, err := local.Start(sctx, local.Options{Bin: self, Dir: dir, Nodes: *nodes, Replicas: *reps, EncryptAtRest: *enc, Args: nodeArgs})
		cancel()
		if err != nil {
			return err
		}
		if !c.Failpoints() {
			fmt.Fprintln(os.Stderr, "chaos: this binary has no failpoints (build with -tags failpoints); slow-disk and full-disk are skipped")
		}
		cfg.Target = c
		r, err := chaos.Run(ctx, cfg)
		c.Close()
		if err != nil {
			return err
		}
		if removeAfter && r.Verdict == report.Pass {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "chaos: the nodes' data and logs are in %s\n", dir)
		}
		return finish(r)
	case "attach":
		if len(kubeconfigs) == 0 {
			return errors.New("chaos attach: give --kubeconfig NODE=PATH for every node")
		}
		var ns []chaos.AttachNode
		for _, name := range kubeconfigs.keys() {
			ns = append(ns, chaos.AttachNode{Name: name, Kubeconfig: kubeconfigs[name], Kill: kills[name], Restart: restarts[name]})
		}
		for name := range kills {
			if _, ok := kubeconfigs[name]; !ok {
				return fmt.Errorf("chaos attach: --kill for %s, which has no --kubeconfig", name)
			}
		}
		t, err := chaos.NewAttached(ns)
		if err != nil {
			return err
		}
		if len(kills) < len(kubeconfigs) {
			return errors.New("chaos attach: every node needs --kill and --restart commands")
		}
		cfg.Target = t
		fmt.Fprintf(os.Stderr, "chaos: seed %d; attached to %d nodes\n", cfg.Seed, len(ns))
		r, err := chaos.Run(ctx, cfg)
		if err != nil {
			return err
		}
		return finish(r)
	}
	return fmt.Errorf("chaos: unknown mode %q (want local, attach or check)", mode)
}

func finish(r *report.Report) error {
	fmt.Println()
	r.Write(os.Stdout, false)
	if r.Verdict != report.Pass {
		return errChaosFailed
	}
	return nil
}

// mapFlag is a repeated NAME=VALUE flag.
type mapFlag map[string]string

func (m mapFlag) String() string { return fmt.Sprint(map[string]string(m)) }

func (m mapFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NODE=VALUE, got %q", v)
	}
	m[name] = value
	return nil
}

func (m mapFlag) keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
