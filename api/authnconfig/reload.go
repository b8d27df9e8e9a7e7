package authnconfig

import (
	"context"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authnmetrics "k8s.io/apiserver/pkg/server/options/authenticationconfig/metrics"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
	"k8s.io/kubernetes/pkg/util/filesystem"
)

// Reload timing. kube-apiserver polls the file every minute besides
// watching it, and gives a new configuration a minute to initialise its
// issuers; it checks them every 10s, here every second (the check reads
// an atomic), so that a reload takes effect as soon as the issuers answer.
const (
	pollInterval  = time.Minute
	updateTimeout = time.Minute
	healthEvery   = time.Second
)

// Authentication is the configuration a node authenticates with.
type Authentication struct {
	// Anonymous is the file's anonymous section; nil without one. It is
	// read once: a reload that changes it is refused.
	Anonymous *apiserver.AnonymousAuthConfig
	// Token authenticates the federated issuers' tokens; nil when neither
	// a file nor --oidc-* flags configure any.
	Token authenticator.Token

	opts Options
	log  *slog.Logger
	jwt  *JWT
	data string
	mu   sync.Mutex
	// cfg and algs are the running configuration and its signing
	// algorithms (under mu), which Refetch builds again. Each reload that
	// succeeds sets a newly decoded cfg, so a refetch that finds another
	// cfg than the one it built knows a reload came between.
	cfg  *apiserver.AuthenticationConfiguration
	algs []string
	// refetch asks Run to build the issuers again (Refetch).
	refetch chan struct{}
}

// Load reads and validates the configuration o describes and builds its
// issuers, whose background fetches live as long as ctx. It does not wait
// for any issuer to answer.
func Load(ctx context.Context, o Options, log *slog.Logger) (*Authentication, error) {
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.MaxFetchBytes <= 0 {
		o.MaxFetchBytes = DefaultMaxFetchBytes
	}
	if o.RefetchEvery <= 0 {
		o.RefetchEvery = DefaultRefetchEvery
	}
	if o.RefetchFor <= 0 {
		o.RefetchFor = DefaultRefetchFor
	}
	cfg, data, algs, err := load(&o)
	if err != nil {
		return nil, err
	}
	a := &Authentication{opts: o, log: log, data: data, Anonymous: cfg.Anonymous, cfg: cfg, algs: algs, refetch: make(chan struct{}, 1)}
	if o.File == "" && len(cfg.JWT) == 0 {
		return a, nil
	}
	set, err := buildIssuers(ctx, cfg, algs, &o)
	if err != nil {
		return nil, err
	}
	a.jwt = &JWT{}
	a.jwt.cur.Store(set)
	a.Token = a.jwt
	return a, nil
}

// Run reloads the file whenever it changes, and builds the issuers again
// when asked to (Refetch), until ctx ends.
func (a *Authentication) Run(ctx context.Context) {
	if a.jwt != nil {
		go a.refetchLoop(ctx)
	}
	if a.opts.File == "" {
		return
	}
	authnmetrics.RegisterMetrics()
	filesystem.WatchUntil(ctx, pollInterval, a.opts.File, func() { a.reload(ctx) },
		func(err error) { a.log.Error("watching authentication config file", "error", err) })
}

// reload is kube-apiserver's reload of the file, step for step: unchanged
// bytes do nothing; bytes that will never be valid are remembered so as
// not to be retried; a configuration whose issuers do not all initialise
// in time is retried on the next event.
func (a *Authentication) reload(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, err := os.ReadFile(a.opts.File)
	if err != nil {
		a.failed("failed to read authentication config file", err)
		return
	}
	if string(b) == a.data {
		return
	}
	cfg, err := decode(b)
	if err != nil {
		a.failed("failed to load authentication config", err)
		a.data = string(b)
		return
	}
	errs := validate(cfg, &a.opts)
	if !reflect.DeepEqual(a.Anonymous, cfg.Anonymous) {
		errs = append(errs, field.Forbidden(field.NewPath("anonymous"), "changed from initial configuration file"))
	}
	if err := errs.ToAggregate(); err != nil {
		a.failed("failed to validate authentication config", err)
		a.data = string(b)
		return
	}
	tctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	algs := oidc.AllValidSigningAlgorithms()
	set, err := a.build(ctx, tctx, cfg, algs)
	if err != nil {
		a.failed("failed to update authentication config", err)
		return
	}
	a.swap(ctx, set)
	a.data, a.cfg, a.algs = string(b), cfg, algs
	a.log.Info("reloaded authentication config")
	authnmetrics.RecordAuthenticationConfigAutomaticReloadSuccess(a.opts.ServerID)
}

// build builds cfg's issuers under life and waits (until deadline ends)
// for all of them to initialise. It needs no lock: it reads only its
// arguments and the options.
func (a *Authentication) build(life, deadline context.Context, cfg *apiserver.AuthenticationConfiguration, algs []string) (*issuers, error) {
	set, err := buildIssuers(life, cfg, algs, &a.opts)
	if err != nil {
		return nil, err
	}
	var last error
	werr := wait.PollUntilContextCancel(deadline, healthEvery, true, func(context.Context) (bool, error) {
		last = set.health()
		return last == nil, nil
	})
	if last != nil || werr != nil {
		set.cancel()
		return nil, utilerrors.NewAggregate([]error{last, werr})
	}
	return set, nil
}

// swap makes set, built and initialised, the running set; the old set
// keeps fetching for a minute (until life ends), for requests still
// using it. The caller holds mu.
func (a *Authentication) swap(life context.Context, set *issuers) {
	old := a.jwt.cur.Swap(set)
	go func() {
		t := time.NewTimer(time.Minute)
		defer t.Stop()
		select {
		case <-life.Done():
		case <-t.C:
		}
		old.cancel()
	}()
}

// Refetch asks for the running issuers to be built again, which fetches
// their discovery documents and key sets anew: at once, then every
// Options.RefetchEvery until RefetchFor has passed. go-oidc keeps the keys
// it has fetched, and fetches again only for a key id it does not hold,
// so a key an issuer stopped publishing would stay accepted until the
// process restarts. The node calls it when its own signing keys change,
// for an issuer whose key set is this cluster's (the fleet set-up: a
// kube-apiserver signing through trustplane's external signer), so that a
// key retired to revoke it (rotate signing-key finish --force) stops
// verifying there too; the repeats cover an issuer that republishes the
// keys late, and a node that serves them within --max-stale-read. It
// returns at once; Run does the work, and while an issuer cannot be
// reached the running set stays.
func (a *Authentication) Refetch() {
	select {
	case a.refetch <- struct{}{}:
	default:
	}
}

func (a *Authentication) refetchLoop(ctx context.Context) {
	var next <-chan time.Time
	var until time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.refetch:
			until = time.Now().Add(a.opts.RefetchFor)
		case <-next:
		}
		a.refetchNow(ctx)
		next = nil
		if time.Now().Before(until) {
			next = time.After(a.opts.RefetchEvery)
		}
	}
}

// refetchNow builds the running configuration's issuers again and, once
// they have initialised, makes them the running set (swap). It holds mu
// only to read the configuration and to swap, not while it waits for the
// issuers (up to a minute when one cannot be reached): a reload of the
// file meanwhile, which may be the operator taking that issuer out, is
// not kept waiting. A reload that made another configuration running in
// the meantime fetched every key anew, so the refetched set is dropped.
func (a *Authentication) refetchNow(ctx context.Context) {
	a.mu.Lock()
	cfg, algs := a.cfg, a.algs
	a.mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	set, err := a.build(ctx, tctx, cfg, algs)
	if err != nil {
		a.log.Warn("the federated issuers' keys not fetched again; the keys fetched before still verify", "error", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg != cfg {
		set.cancel()
		a.log.Info("the federated issuers' keys fetched again were dropped: a reload replaced the configuration meanwhile")
		return
	}
	a.swap(ctx, set)
	a.log.Info("fetched the federated issuers' keys again")
}

func (a *Authentication) failed(msg string, err error) {
	a.log.Error(msg, "error", err)
	authnmetrics.RecordAuthenticationConfigAutomaticReloadFailure(a.opts.ServerID)
}
