package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/trustplane/trustplane/chaos/history"
	"github.com/trustplane/trustplane/chaos/report"
	"github.com/trustplane/trustplane/chaos/workload"
)

// Config is one run.
type Config struct {
	// Mode names the target in the report ("local", "attach").
	Mode   string
	Target Target
	// Duration is how long the workload and the faults run; the settle
	// and the checks come after it.
	Duration time.Duration
	// Faults are the fault names to cycle through (default: every one the
	// target supports); Quiet is the pause between two faults.
	Faults []string
	Quiet  time.Duration
	// Hold scales how long each fault is held (1 = the defaults).
	Hold     float64
	Workload workload.Config
	// MaxStaleRead is the servers' --max-stale-read.
	MaxStaleRead time.Duration
	// Out is the directory the history and the report are written to.
	Out string
	// Progress receives the live progress line (nil: none).
	Progress io.Writer
	Seed     int64
	// CheckTimeout bounds the linearizability search.
	CheckTimeout time.Duration
}

// Run drives the workload and the faults for cfg.Duration, settles the
// cluster, checks the history and writes the report.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Minute
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 5 * time.Second
	}
	if cfg.Hold <= 0 {
		cfg.Hold = 1
	}
	if cfg.MaxStaleRead <= 0 {
		cfg.MaxStaleRead = 5 * time.Second
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 2 * time.Minute
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	names := cfg.Target.Names()
	wc := cfg.Workload
	wc.Seed = cfg.Seed
	if wc.RunID == "" {
		wc.RunID = fmt.Sprintf("r%d", rand.New(rand.NewSource(cfg.Seed)).Intn(1_000_000))
	}
	for _, name := range names {
		rc, err := followConfig(cfg.Target, name)
		if err != nil {
			return nil, err
		}
		wc.Endpoints = append(wc.Endpoints, workload.Endpoint{Name: name, Config: rc})
	}
	rec := workload.NewRecorder(time.Now())
	wl, err := workload.New(wc, rec)
	if err != nil {
		return nil, err
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	startRV, err := wl.Prepare(pctx)
	pcancel()
	if err != nil {
		return nil, err
	}
	mon, err := newMonitor(cfg.Target)
	if err != nil {
		return nil, err
	}
	nem := &nemesis{t: cfg.Target, mon: mon, rng: rand.New(rand.NewSource(cfg.Seed)), now: rec.Now, hold: cfg.Hold}
	faultNames := cfg.Faults
	if len(faultNames) == 0 {
		faultNames = Faults
	}
	var usable []string
	for _, f := range faultNames {
		if nem.supported(f) {
			usable = append(usable, f)
		} else if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "chaos: %s cannot cause %q; skipping it\n", cfg.Mode, f)
		}
	}

	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	monCtx, stopMon := context.WithCancel(ctx)
	defer stopMon()
	go mon.run(monCtx)

	var current sync.Map // "fault" → description, for the progress line
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	var watchersDone <-chan struct{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchersDone = wl.Run(runCtx, watchCtx, startRV)
	}()
	var faults []report.Fault
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for i := 0; runCtx.Err() == nil && len(usable) > 0; i++ {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(cfg.Quiet):
			}
			name := usable[i%len(usable)]
			current.Store("fault", name)
			f := nem.inject(runCtx, name)
			current.Store("fault", "")
			faults = append(faults, f)
		}
	}()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.Progress == nil {
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				fmt.Fprintln(cfg.Progress)
				return
			case <-t.C:
				f, _ := current.Load("fault")
				fmt.Fprintf(cfg.Progress, "\r[%4ds/%ds] ok %d  fail %d  unknown %d  events %d  leader %s (changes %d)  fault: %-12v",
					int(time.Since(rec.Start()).Seconds()), int(cfg.Duration.Seconds()),
					rec.OK.Load(), rec.Failed.Load(), rec.Unknown.Load(), rec.Events.Load(), mon.Leader(), mon.Changes(), f)
			}
		}
	}()
	wg.Wait()
	end := rec.Now()
	<-faultsDone
	<-progressDone
	if cfg.Progress != nil {
		fmt.Fprintln(cfg.Progress, "chaos: workload done; healing and waiting for every node to agree")
	}
	nem.recover()
	final := wl.Final(ctx, 90*time.Second)
	// Let the watches catch up with the state just read, then stop them.
	time.Sleep(2 * time.Second)
	stopWatches()
	<-watchersDone
	stopMon()

	h := &history.History{Nodes: names, StartRV: startRV, MaxStaleRead: cfg.MaxStaleRead, Final: final, End: end}
	rec.Fill(h)
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "chaos: checking %d operations and %d events\n", len(h.Ops), len(h.Events))
	}
	// The history and the fault record (faults.json) are written before
	// the checks run, so that a run is never lost to a checker:
	// "trustplane chaos check" can redo them all.
	hp := filepath.Join(cfg.Out, "history.json")
	var written []string
	if f, err := os.Create(hp); err == nil {
		if h.Write(f) == nil {
			written = append(written, hp)
		}
		f.Close()
	}
	measured := report.Recorded{Faults: faults, LeaderChanges: mon.Changes(), TermRise: mon.TermRise()}
	fp := filepath.Join(cfg.Out, report.FaultsFile)
	if f, err := os.Create(fp); err == nil {
		if report.WriteRecorded(f, measured) == nil {
			written = append(written, fp)
		}
		f.Close()
	}
	r := judge(h, cfg, cfg.Mode, &measured)
	r.Files = append(written, r.Files...)
	rp := filepath.Join(cfg.Out, "report.txt")
	if f, err := os.Create(rp); err == nil {
		r.Write(f, true)
		f.Close()
		r.Files = append(r.Files, rp)
	}
	return r, nil
}
