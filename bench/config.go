package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Config is one bench run. The command fills it from flags; nothing in
// this package reads flags.
type Config struct {
	// Kubeconfigs are the files clients are built from, one or more (say,
	// one per node). Client i uses Kubeconfigs[i%len(Kubeconfigs)].
	Kubeconfigs []string
	// Workloads are the names to run, in this order (see Workloads).
	Workloads []string
	// Clients is the number of concurrent clients of each workload.
	Clients int
	// Duration is how long each workload's timed phase lasts.
	Duration time.Duration
	// RequestTimeout bounds every single operation (a CSR's whole issue
	// included).
	RequestTimeout time.Duration
	// SetupTimeout bounds each workload's preparation (seeding the list
	// objects, minting a token) and CleanupTimeout the deletion at the end.
	SetupTimeout, CleanupTimeout time.Duration
	// CreateKind is what the create workload creates: "configmaps" or
	// "serviceaccounts".
	CreateKind string
	// ListSize is how many ConfigMaps the list workloads list (seeded once)
	// and ListPageSize the limit of the paged list.
	ListSize, ListPageSize int
	// Objects is how many objects (ServiceAccounts, ConfigMaps and
	// Secrets, 1 KiB each) are stored before the first workload and kept
	// until cleanup, so that every workload runs against a store of that
	// size; 0: none.
	Objects int
	// Keep leaves what the run created (its namespaces, with the Objects
	// fill, and its CSRs) in place instead of deleting it at the end, so
	// that a store of a known size can be measured afterwards (a snapshot,
	// a new node's catch-up). The run's label (RunLabel) finds it later.
	Keep bool
	// Watchers is the number of watches of the watch workload, and
	// WatchRate the writes per second its writer makes (0: as fast as one
	// writer can).
	Watchers  int
	WatchRate float64
	// Protobuf makes clients speak application/vnd.kubernetes.protobuf.
	Protobuf bool
	// QPS and Burst are client-go's client-side rate limit per client;
	// QPS < 0 turns it off (the default: the limit would cap the figures).
	// Burst defaults to 1, so that --qps alone paces each client evenly:
	// client-go refuses a positive QPS with no burst.
	QPS   float32
	Burst int
	// Progress receives the live line (nil: none). Terminal selects an
	// updating line; otherwise a plain line is written every
	// ProgressInterval.
	Progress         io.Writer
	Terminal         bool
	ProgressInterval time.Duration
	// ServerPIDs are the server processes on this machine (every node of
	// a local cluster; kube-apiserver and etcd) whose CPU and memory each
	// workload records, summed. Empty: none are recorded.
	ServerPIDs []int
	// procDir is where process state is read (/proc; tests change it).
	procDir string
	// Tool is the version string of the binary running the bench, and
	// Flags the flags it was given; both go into the result as they are.
	Tool  string
	Flags map[string]string
}

// DefaultConfig is the configuration the command starts from.
func DefaultConfig() Config {
	return Config{
		Workloads:        WorkloadNames(),
		Clients:          16,
		Duration:         10 * time.Second,
		RequestTimeout:   30 * time.Second,
		SetupTimeout:     5 * time.Minute,
		CleanupTimeout:   2 * time.Minute,
		CreateKind:       "configmaps",
		ListSize:         10000,
		ListPageSize:     500,
		Watchers:         50,
		WatchRate:        100,
		QPS:              -1,
		Burst:            1,
		ProgressInterval: 5 * time.Second,
		procDir:          "/proc",
	}
}

// Validate says what is wrong with c, naming the setting.
func (c Config) Validate() error {
	var errs []string
	if len(c.Kubeconfigs) == 0 {
		errs = append(errs, "at least one kubeconfig is needed")
	}
	if len(c.Workloads) == 0 {
		errs = append(errs, "no workloads selected")
	}
	seen := map[string]bool{}
	for _, w := range c.Workloads {
		if lookup(w) == nil {
			errs = append(errs, fmt.Sprintf("unknown workload %q (known: %s)", w, strings.Join(WorkloadNames(), ",")))
		}
		if seen[w] {
			// A second run would create objects under the names of the first.
			errs = append(errs, fmt.Sprintf("workload %q given twice", w))
		}
		seen[w] = true
	}
	if c.Clients < 1 || c.Clients > 4096 {
		errs = append(errs, fmt.Sprintf("clients %d: want 1..4096", c.Clients))
	}
	if c.Duration <= 0 {
		errs = append(errs, "duration must be positive")
	}
	if c.RequestTimeout <= 0 || c.SetupTimeout <= 0 || c.CleanupTimeout <= 0 {
		errs = append(errs, "timeouts must be positive")
	}
	if c.CreateKind != "configmaps" && c.CreateKind != "serviceaccounts" {
		errs = append(errs, fmt.Sprintf("create kind %q: want configmaps or serviceaccounts", c.CreateKind))
	}
	if c.ListSize < 1 || c.ListSize > 1000000 {
		errs = append(errs, fmt.Sprintf("list size %d: want 1..1000000", c.ListSize))
	}
	if c.Objects < 0 || c.Objects > 10000000 {
		errs = append(errs, fmt.Sprintf("objects %d: want 0..10000000", c.Objects))
	}
	if c.ListPageSize < 1 {
		errs = append(errs, "list page size must be positive")
	}
	if c.Watchers < 1 || c.Watchers > 100000 {
		errs = append(errs, fmt.Sprintf("watchers %d: want 1..100000", c.Watchers))
	}
	if c.WatchRate < 0 {
		errs = append(errs, "watch rate must not be negative")
	}
	if c.QPS > 0 && c.Burst < 1 {
		errs = append(errs, fmt.Sprintf("burst %d: want at least 1 with a qps of %v", c.Burst, c.QPS))
	}
	if c.ProgressInterval <= 0 {
		errs = append(errs, "progress interval must be positive")
	}
	pids := map[int]bool{}
	for _, pid := range c.ServerPIDs {
		if pid <= 0 || pids[pid] {
			// Counting a process twice would double its figures.
			errs = append(errs, fmt.Sprintf("server pid %d: want distinct positive PIDs", pid))
		}
		pids[pid] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}
