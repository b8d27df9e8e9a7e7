package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/trustplane/trustplane/bench"
)

// benchCmd implements "trustplane bench [flags]" and
// "trustplane bench compare A.json B.json".
func benchCmd(args []string) error {
	if len(args) > 0 && args[0] == "compare" {
		return benchCompare(args[1:])
	}
	if len(args) > 0 && args[0] == "plot" {
		return benchPlot(args[1:])
	}
	cfg, out, err := benchFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the run stops and cleans up; a second one
		// ends the process at once.
		<-ctx.Done()
		stop()
	}()
	res, err := bench.Run(ctx, cfg)
	if res == nil {
		return err
	}
	fmt.Println()
	if werr := bench.WriteTable(os.Stdout, res); werr != nil {
		return errors.Join(err, werr)
	}
	if out != "" {
		if werr := writeResult(out, res); werr != nil {
			return errors.Join(err, werr)
		}
		fmt.Fprintf(os.Stderr, "bench: result written to %s\n", out)
	}
	return err
}

// benchFlags turns the command line (and TRUSTPLANE_BENCH_* variables)
// into a configuration and the JSON output path.
func benchFlags(args []string) (bench.Config, string, error) {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var kubeconfigs listFlag
	fs.Var(&kubeconfigs, "kubeconfig", "kubeconfig to run clients against; repeat it (or give a comma-separated list) for one per node, clients are spread round-robin (default: $KUBECONFIG or ./trustplane-data/admin.kubeconfig)")
	workloads := fs.String("workloads", strings.Join(cfg.Workloads, ","), "comma-separated workloads to run, in this order")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients per workload, each with its own connection")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each workload runs")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "bound on one operation (a CSR's whole issue included)")
	fs.DurationVar(&cfg.SetupTimeout, "setup-timeout", cfg.SetupTimeout, "bound on each workload's preparation (seeding the list objects, ...)")
	fs.DurationVar(&cfg.CleanupTimeout, "cleanup-timeout", cfg.CleanupTimeout, "bound on deleting what the run created")
	fs.StringVar(&cfg.CreateKind, "create-kind", cfg.CreateKind, "what the create workload creates: configmaps or serviceaccounts")
	fs.IntVar(&cfg.ListSize, "list-size", cfg.ListSize, "ConfigMaps seeded once for the list workloads")
	fs.IntVar(&cfg.ListPageSize, "list-page-size", cfg.ListPageSize, "limit of each page of list-paged (and of mixed's list page)")
	fs.IntVar(&cfg.Objects, "objects", cfg.Objects, "objects (ServiceAccounts, ConfigMaps and Secrets, 1 KiB each) stored before the first workload and kept until cleanup, so that the workloads run against a store of that size; the fill is reported as workload \"fill\" and bounded by --setup-timeout")
	fs.BoolVar(&cfg.Keep, "keep", cfg.Keep, "leave what the run created (its namespaces with the --objects fill, its CSRs) instead of deleting it, to measure a store of that size afterwards (snapshot, catch-up); it carries the run's label")
	fs.IntVar(&cfg.Watchers, "watchers", cfg.Watchers, "watches of the watch workload, each with its own connection")
	fs.Float64Var(&cfg.WatchRate, "watch-rate", cfg.WatchRate, "writes per second of the watch workload's writer (0: as fast as it can)")
	fs.BoolVar(&cfg.Protobuf, "protobuf", cfg.Protobuf, "speak application/vnd.kubernetes.protobuf instead of JSON")
	qps := fs.Float64("qps", float64(cfg.QPS), "client-go rate limit per client (negative: none, so that the client does not cap the figures)")
	fs.IntVar(&cfg.Burst, "burst", cfg.Burst, "client-go burst per client, with --qps (at least 1)")
	fs.DurationVar(&cfg.ProgressInterval, "progress-interval", cfg.ProgressInterval, "how often a progress line is written when stderr is not a terminal")
	var serverPIDs listFlag
	fs.Var(&serverPIDs, "server-pid", "PID of a server process on this machine whose CPU and memory each workload records; repeat it (or give a comma-separated list) for every node of a local cluster, or for kube-apiserver and etcd: their figures are summed")
	out := fs.String("out", "", "write the result as JSON to this file (for \"trustplane bench compare\")")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: trustplane bench [flags]\n       trustplane bench compare A.json[,A2.json...] B.json[,B2.json...]\n       trustplane bench plot --x FLAG --y WORKLOAD:METRIC --out plot.svg RESULT.json...\n\nworkloads: %s\nEvery flag also reads TRUSTPLANE_BENCH_<FLAG>.\n\n", strings.Join(bench.WorkloadNames(), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	if err := envTwinsWith(fs, benchEnvName); err != nil {
		return cfg, "", err
	}
	if len(kubeconfigs) == 0 {
		kubeconfigs = listFlag{defaultKubeconfig()}
	}
	cfg.Kubeconfigs = kubeconfigs
	for _, p := range serverPIDs {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return cfg, "", fmt.Errorf("%w: server pid %q is not a number", bench.ErrConfig, p)
		}
		cfg.ServerPIDs = append(cfg.ServerPIDs, pid)
	}
	cfg.Workloads = splitList(*workloads)
	cfg.QPS = float32(*qps)
	cfg.Progress = os.Stderr
	cfg.Terminal = term.IsTerminal(int(os.Stderr.Fd()))
	cfg.Tool = versionString()
	cfg.Flags = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { cfg.Flags[f.Name] = f.Value.String() })
	cfg.Flags["kubeconfig"] = strings.Join(kubeconfigs, ",")
	return cfg, *out, cfg.Validate()
}

// benchEnvName is the environment twin of a bench flag. It differs from
// serve's TRUSTPLANE_<FLAG> so that a node's settings (say, in a pod that
// also runs the bench) never leak into the bench's.
func benchEnvName(flagName string) string {
	return "TRUSTPLANE_BENCH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// benchCompare prints the ratios of B to A. Each side may be several
// results, comma-separated (the rounds of an A/B run): it is then their
// median.
func benchCompare(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: trustplane bench compare A.json[,A2.json...] B.json[,B2.json...]")
	}
	var sides [2]*bench.Result
	var names [2]string
	for i, arg := range args {
		paths := splitList(arg)
		var runs []*bench.Result
		for _, p := range paths {
			r, err := readResult(p)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		if len(runs) == 0 {
			return errors.New("usage: trustplane bench compare A.json[,A2.json...] B.json[,B2.json...]")
		}
		sides[i], names[i] = bench.Median(runs), arg
		if len(runs) > 1 {
			names[i] = fmt.Sprintf("median of %d runs: %s", len(runs), arg)
		}
	}
	return bench.WriteCompare(os.Stdout, names[0], sides[0], names[1], sides[1])
}

// benchPlot draws results as an SVG line chart: a flag's value against
// workload metrics, one line per metric and server.
func benchPlot(args []string) error {
	fs := flag.NewFlagSet("bench plot", flag.ContinueOnError)
	var spec bench.PlotSpec
	var ys listFlag
	fs.StringVar(&spec.X, "x", "objects", "the bench flag on the x axis (objects, watchers, list-size, clients, ...)")
	fs.Var(&ys, "y", "WORKLOAD:METRIC on the y axis, METRIC one of ops, p50, p90, p99, cpu (server CPU ms per op), rss (server RSS MiB at the end of the workload); repeat for more lines")
	fs.BoolVar(&spec.LogX, "log-x", false, "log10 x axis")
	fs.BoolVar(&spec.LogY, "log-y", false, "log10 y axis")
	fs.StringVar(&spec.Title, "title", "", "the plot's title")
	out := fs.String("out", "", "the SVG file to write (required)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: trustplane bench plot --x FLAG --y WORKLOAD:METRIC [--y ...] --out plot.svg RESULT.json...\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return errors.New("usage: trustplane bench plot --x FLAG --y WORKLOAD:METRIC [--y ...] --out plot.svg RESULT.json...")
	}
	spec.Y = ys
	var results []*bench.Result
	for _, path := range fs.Args() {
		r, err := readResult(path)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	series, err := bench.PlotSeries(spec, results)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := bench.WriteSVG(f, spec, series); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readResult(path string) (*bench.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := bench.ReadResult(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

func writeResult(path string, r *bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// listFlag is a repeated flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, splitList(v)...)
	return nil
}
