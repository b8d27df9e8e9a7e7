package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/authn"
	apiauthz "github.com/trustplane/trustplane/api/authz"
	"github.com/trustplane/trustplane/api/controllers"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/failpoint"
	"github.com/trustplane/trustplane/watchcache"
)

// options are the serve flags.
type options struct {
	dataDir          string
	listen           string
	raftAddr         string
	gossipAddr       string
	nodeName         string
	join             string
	bootstrapExpect  int
	caDir            string
	tlsSANs          string
	runtimeConfig    string
	saIssuer         string
	serviceCIDR      string
	logLevel         string
	controllers      bool
	controllersQPS   float64
	controllersBurst int
	signing          signingFlags
	advertise        advertiseFlags
	addrs            addresses   // resolved from advertise
	atRest           atRestFlags // data at rest (atrest.go)
	limits           limitFlags

	// Token authentication (api/authn).
	tokenAuthFile           string
	saMaxTokenExpiration    time.Duration
	saExtendTokenExpiration bool

	// Raft and membership tuning (documented in the README).
	snapshotThreshold uint64
	snapshotInterval  time.Duration
	trailingLogs      uint64
	deadServerTimeout time.Duration
	leaveOnTerminate  bool
	writeLeaderWait   time.Duration
	maxStaleRead      time.Duration
	watchWindow       time.Duration
	compactRetention  time.Duration
	compactInterval   time.Duration
}

func parseServe(args []string) (*options, error) {
	host, _ := os.Hostname()
	o := &options{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data-dir", "./trustplane-data", "raft log, snapshots, generated certificates and admin.kubeconfig")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:6443", "HTTPS API address")
	fs.StringVar(&o.raftAddr, "raft-addr", "127.0.0.1:6444", "raft transport address (mutual TLS)")
	fs.StringVar(&o.gossipAddr, "gossip-addr", "127.0.0.1:6445", "memberlist gossip address (encrypted); used when --bootstrap-expect > 1 or --join is set")
	fs.StringVar(&o.nodeName, "node-name", host, "unique name of this node")
	fs.StringVar(&o.join, "join", "", "gossip addresses of other nodes, host:port[,...]")
	fs.IntVar(&o.bootstrapExpect, "bootstrap-expect", 1, "servers to see before the first election (1 bootstraps a one-node cluster; with --join the default is 0: join an existing cluster)")
	fs.StringVar(&o.caDir, "ca-dir", "", "shared cluster CA directory (default <data-dir>/pki, generated when absent)")
	fs.StringVar(&o.tlsSANs, "tls-san", "", "extra DNS names or IP addresses for the API's serving certificate, comma-separated (k3s' --tls-san): the names clients reach the node by, such as a Service's DNS names")
	fs.StringVar(&o.runtimeConfig, "runtime-config", "", "enable or disable API versions, kube-apiserver's syntax: certificates.k8s.io/v1alpha1=true,...")
	fs.StringVar(&o.saIssuer, "service-account-issuer", authn.DefaultIssuer, "service account token issuer URL (the \"iss\" of issued tokens and the API audience)")
	fs.StringVar(&o.tokenAuthFile, "token-auth-file", "", "static bearer tokens, kube's CSV format: token,user,uid[,\"group1,group2\"]")
	fs.DurationVar(&o.saMaxTokenExpiration, "service-account-max-token-expiration", 0, "longest validity of a token from the TokenRequest API; longer requests are shortened to it (0: no cap; else between 1h and 2^32s)")
	fs.BoolVar(&o.saExtendTokenExpiration, "service-account-extend-token-expiration", true, "issue pod-bound tokens requested for 3607s (the kubelet's transition value) for a year, as kube-apiserver does")
	fs.StringVar(&o.serviceCIDR, "service-cluster-ip-range", "10.96.0.0/12", "range whose first address is the ClusterIP of default/kubernetes")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.signing.register(fs)
	o.advertise.register(fs)
	o.atRest.register(fs)
	o.limits.register(fs)
	fs.Float64Var(&o.controllersQPS, "controllers-api-qps", 1000, "requests per second each controller identity may send to the API (kube-controller-manager's --kube-api-qps, which defaults to 20)")
	fs.IntVar(&o.controllersBurst, "controllers-api-burst", 2000, "burst above --controllers-api-qps (kube-controller-manager's --kube-api-burst)")
	fs.BoolVar(&o.controllers, "controllers", true, "run the leader-only controllers (default ServiceAccounts, kube-root-ca.crt, token Secrets, cluster-role aggregation)")
	d := cluster.DefaultConfig()
	fs.Uint64Var(&o.snapshotThreshold, "raft-snapshot-threshold", d.SnapshotThreshold, "log entries since the last snapshot that trigger a new one")
	fs.DurationVar(&o.snapshotInterval, "raft-snapshot-interval", d.SnapshotInterval, "how often the snapshot threshold is checked")
	fs.Uint64Var(&o.trailingLogs, "raft-trailing-logs", d.TrailingLogs, "log entries kept after a snapshot, so lagging followers catch up from the log")
	fs.DurationVar(&o.deadServerTimeout, "dead-server-timeout", d.DeadServerTimeout, "a voter that gossip reports failed this long, and that raft no longer reaches, is removed while a quorum stays (negative: never)")
	fs.BoolVar(&o.leaveOnTerminate, "leave-on-terminate", false, "on SIGTERM/SIGINT, leave the cluster (be removed as a voter) when that keeps a quorum of alive voters; it never forces. Default false, as for Consul servers: a stopped node stays a voter and rejoins as itself on restart, which is what a rolling restart or a crash-and-restart wants. Set it for nodes that are going away for good")
	fs.DurationVar(&o.writeLeaderWait, "write-leader-wait", 10*time.Second, "how long a write waits for a leader during an election before 503")
	fs.DurationVar(&o.maxStaleRead, "max-stale-read", 5*time.Second, "a node that has not heard from a leader for longer serves no watch, and answers resourceVersion=0 reads as linearizable ones (503 when it is cut off) instead of from its own, possibly old, state (0: no bound)")
	fs.DurationVar(&o.compactRetention, "compact-retention", d.CompactRetention, "MVCC history kept for exact reads, continue tokens and watch history across restarts; older gets 410 Gone")
	fs.DurationVar(&o.compactInterval, "compact-interval", d.CompactInterval, "how often the leader compacts history")
	fs.DurationVar(&o.watchWindow, "watch-cache-window", watchcache.DefaultConfig().Window, "how much watch history each node keeps; older resourceVersions get 410 Gone")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := envTwins(fs); err != nil {
		return nil, err
	}
	expectSet := false
	fs.Visit(func(f *flag.Flag) { expectSet = expectSet || f.Name == "bootstrap-expect" })
	if _, ok := os.LookupEnv(envName("bootstrap-expect")); ok {
		expectSet = true
	}
	if o.join != "" && !expectSet {
		// A node told where its cluster is joins it: it must not bootstrap
		// a cluster of its own.
		o.bootstrapExpect = 0
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.bootstrapExpect < 0 {
		return nil, fmt.Errorf("--bootstrap-expect %d: must not be negative", o.bootstrapExpect)
	}
	if o.nodeName == "" {
		return nil, errors.New("--node-name is required")
	}
	if _, err := parseRuntimeConfig(o.runtimeConfig); err != nil {
		return nil, err
	}
	if err := validateTLSSANs(o.tlsSANs); err != nil {
		return nil, err
	}
	if err := o.signing.validate(); err != nil {
		return nil, err
	}
	if err := o.limits.validate(); err != nil {
		return nil, err
	}
	var err error
	if o.addrs, err = o.advertise.resolve(o.listen, o.raftAddr, o.gossipAddr, o.multiNode()); err != nil {
		return nil, err
	}
	if o.controllersQPS <= 0 || o.controllersBurst < 1 {
		return nil, fmt.Errorf("--controllers-api-qps %v and --controllers-api-burst %d: both must be positive", o.controllersQPS, o.controllersBurst)
	}
	return o, nil
}

func serve(args []string) error {
	o, err := parseServe(args)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// kube's libraries (client-go, the controllers, the admission plugins)
	// log through klog: route it through the same handler.
	klog.SetSlogLogger(log.With("component", "kube"))
	slog.SetDefault(log)

	privateFiles() // data at rest (atrest.go): 0600 files, 0700 directories
	regCfg, err := o.atRest.registryConfig()
	if err != nil {
		return err
	}
	if err := privateDir(log, o.dataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	pki := filepath.Join(o.dataDir, "pki")
	caDir := o.caDir
	if caDir == "" {
		caDir = pki
	}
	ca, err := certs.LoadOrCreateCA(caDir)
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}
	clusterIP, err := firstServiceIP(o.serviceCIDR)
	if err != nil {
		return err
	}
	listenHost, listenPort, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	serving, err := ca.EnsurePair(filepath.Join(pki, "apiserver.crt"), filepath.Join(pki, "apiserver.key"), servingRequest(o.nodeName, clusterIP, append([]string{listenHost, o.advertise.address}, splitList(o.tlsSANs)...)...))
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	raftHost, _, err := net.SplitHostPort(o.raftAddr)
	if err != nil {
		return fmt.Errorf("--raft-addr: %w", err)
	}
	nodeCA, err := loadNodeCA(caDir, o.multiNode())
	if err != nil {
		return err
	}
	nodes := certs.NewNodeVerifier(nodeCA)
	nodeCert, err := nodeCA.EnsurePair(filepath.Join(pki, "node.crt"), filepath.Join(pki, "node.key"), certs.NodeRequest(o.nodeName, raftHost, hostOf(o.addrs.raft)))
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}

	f := fsm.New()
	ccfg := cluster.DefaultConfig()
	ccfg.NodeName = o.nodeName
	ccfg.DataDir = o.dataDir
	ccfg.RaftAddr = o.raftAddr
	ccfg.RaftAdvertise = o.addrs.raft
	ccfg.BootstrapExpect = o.bootstrapExpect
	ccfg.TLS = nodes.PeerTLS(nodeCert)
	ccfg.PeerName = nodes.ConnNodeName
	ccfg.Logger = log.With("component", "cluster")
	ccfg.SnapshotThreshold = o.snapshotThreshold
	ccfg.SnapshotInterval = o.snapshotInterval
	ccfg.TrailingLogs = o.trailingLogs
	ccfg.DeadServerTimeout = o.deadServerTimeout
	ccfg.CompactRetention = o.compactRetention
	ccfg.CompactInterval = o.compactInterval
	o.limits.setCluster(ccfg)
	if o.multiNode() {
		key, err := readGossipKey(caDir)
		if err != nil {
			return err
		}
		ccfg.GossipAddr = o.gossipAddr
		ccfg.GossipAdvertise = o.addrs.gossip
		ccfg.GossipKey = key
		ccfg.Join = splitList(o.join)
		ccfg.APIAddr = o.addrs.api
		ccfg.ClusterID = ca.ID()
	}
	node, err := cluster.New(ccfg, f)
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	defer node.Shutdown()

	back := backend{node: node, fsm: f}
	rc, err := parseRuntimeConfig(o.runtimeConfig)
	if err != nil {
		return err
	}
	resources := append(append(registry.CoreResources(), authzResources()...), certificateResources(rc)...)
	regCfg.MaxObjectBytes = o.limits.registryConfig().MaxObjectBytes
	reg := registry.New(regCfg, back, resources)
	wired := &wiring{opts: o, log: log, ca: ca, pki: pki, caDir: caDir, node: node, fsm: f, reg: reg, back: back, rc: rc}
	ident, err := setupIdentity(wired)
	if err != nil {
		return err
	}
	az, err := setupAuthz(wired)
	if err != nil {
		return err
	}
	wcfg := watchcache.DefaultConfig()
	wcfg.Window = o.watchWindow
	wcfg.Decode = reg.Decode
	o.limits.setWatchCache(wcfg)
	wc, err := watchcache.New(wcfg, f)
	if err != nil {
		return fmt.Errorf("watch cache: %w", err)
	}
	defer wc.Close()
	var bootstrapped, shuttingDown atomic.Bool
	port, _ := strconv.Atoi(listenPort)

	signers := o.signing.signers(caDir)
	if err := refuseNodeCASigners(nodeCA, signers); err != nil {
		return err
	}
	clientCAs, err := clientCAPool(ca, signers)
	if err != nil {
		return err
	}
	// Node certificates authenticate to the API too (a follower forwarding
	// a write); what they may then assert is decided by acfg.Nodes.
	clientCAs.AddCert(nodeCA.Cert)
	acfg := api.DefaultConfig()
	acfg.Listen = o.listen
	acfg.Logger = log.With("component", "api")
	o.limits.setAPI(acfg)
	acfg.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving},
		// A node calling this API asks for NodeServerName and gets the
		// node certificate, so it can check that it reached a node.
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == certs.NodeServerName {
				return &nodeCert, nil
			}
			return nil, nil
		},
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  clientCAs,
		MinVersion: tls.VersionTLS12,
	}
	acfg.Nodes = nodes
	acfg.LivezChecks = []healthz.HealthChecker{
		healthz.PingHealthz,
		healthz.NamedCheck("raft", func(*http.Request) error { return node.CheckRunning() }),
	}
	acfg.ReadyzChecks = []healthz.HealthChecker{
		healthz.PingHealthz,
		healthz.NamedCheck("raft-leader", func(*http.Request) error { return node.CheckLeader() }),
		healthz.NamedCheck("fsm-caught-up", func(*http.Request) error { return node.CheckCaughtUp() }),
		healthz.NamedCheck("storage", func(*http.Request) error { return node.CheckStorage() }),
		healthz.NamedCheck("raft-member", func(*http.Request) error { return node.CheckMember() }),
		healthz.NamedCheck("poststarthook/bootstrap", func(*http.Request) error {
			if !bootstrapped.Load() {
				return errors.New("default namespaces and services are not created yet")
			}
			return nil
		}),
		healthz.NamedCheck("shutdown", func(*http.Request) error {
			if shuttingDown.Load() {
				return errors.New("process is shutting down")
			}
			return nil
		}),
	}
	acfg.Membership = membership{node: node, clusterID: ca.ID()}
	acfg.MaxStaleRead = o.maxStaleRead
	acfg.Authenticator = ident.authenticator
	acfg.Paths = ident.paths
	acfg.Actions = ident.actions
	acfg.Authorizer = az.authorizer
	acfg.Watch = wc
	if o.multiNode() {
		acfg.Forward = &api.ForwardConfig{
			Leadership:    node,
			TLS:           nodes.ClientTLS(nodeCert),
			WaitForLeader: o.writeLeaderWait,
		}
	}
	srv, err := api.New(acfg, reg)
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	admissionCtx, stopAdmission := context.WithCancel(context.Background())
	defer stopAdmission()
	if err := setupAdmission(admissionCtx, wired, apiURL(srv.Addr().String(), listenHost), az.authorizer); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	log.Info("serving the API", "address", srv.Addr().String(), "node", o.nodeName, "data-dir", o.dataDir)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		tasks := append(append([]leaderTask{func(ctx context.Context) error { return reg.Bootstrap(ctx, clusterIP, int32(port)) }},
			az.bootstrap...), ident.bootstrap...)
		if err := bootstrap(ctx, log, node, f, tasks); err != nil {
			return
		}
		bootstrapped.Store(true)
		go rebootstrapOnLeadership(ctx, log, node, tasks)
		go runControllers(ctx, wired, ident, apiURL(srv.Addr().String(), listenHost))
		kubeconfig := filepath.Join(o.dataDir, "admin.kubeconfig")
		if err := writeAdminKubeconfig(ca, pki, kubeconfig, apiURL(srv.Addr().String(), listenHost)); err != nil {
			log.Error("writing the admin kubeconfig", "error", err)
			return
		}
		log.Info("ready", "kubeconfig", kubeconfig)
		fmt.Fprintf(os.Stderr, "\ntrustplane is ready. Point kubectl at it with:\n\n  export KUBECONFIG=%s\n  kubectl get serviceaccounts -A\n\n", kubeconfig)
	}()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shuttingDown.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// With --leave-on-terminate, leave first (the cluster removes this
	// node, if that keeps a quorum, instead of counting it as failed);
	// then stop serving. Without it the node stays a voter: Shutdown stops
	// gossip without a leave message and it rejoins as itself on restart.
	if o.leaveOnTerminate {
		if err := node.Leave(sctx); err != nil {
			log.Warn("leaving the cluster", "error", err)
		}
	}
	stopAdmission()
	return srv.Shutdown(sctx)
}

// bootstrapKeys are the objects a bootstrapped cluster has; a follower is
// done bootstrapping once it has applied all of them.
var bootstrapKeys = []fsm.Key{
	{Resource: "namespaces", Name: "default"},
	{Resource: "namespaces", Name: "kube-system"},
	{Resource: "namespaces", Name: "kube-public"},
	{Resource: "services", Namespace: "default", Name: "kubernetes"},
	// Written last by the RBAC bootstrap policy (api/authz).
	apiauthz.BootstrapMarker,
	// The first ServiceAccount token signing key (api/authn).
	authn.FirstKey,
}

func bootstrappedLocally(f *fsm.FSM) bool {
	for _, k := range bootstrapKeys {
		if kv, _, err := f.Get(k, 0); err != nil || kv == nil {
			return false
		}
	}
	return true
}

// bootstrap waits until the bootstrap objects exist: the leader creates the
// default namespaces and the kubernetes Service, a follower waits until it
// has applied them. It retries until ctx ends.
func bootstrap(ctx context.Context, log *slog.Logger, node *cluster.Node, f *fsm.FSM, tasks []leaderTask) error {
	for {
		if !node.IsLeader() && bootstrappedLocally(f) {
			return nil
		}
		if node.IsLeader() {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			for _, task := range tasks {
				if err = task(rctx); err != nil {
					break
				}
			}
			cancel()
			if err == nil {
				return nil
			}
			log.Warn("bootstrap failed, retrying", "error", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rebootstrapOnLeadership runs the leader tasks again each time this node
// becomes leader, as kube-apiserver reconciles its bootstrap policy at every
// start: a leader running a newer version brings the RBAC policy and the
// default objects up to date. The tasks are idempotent and write nothing
// when all is in place. It returns when ctx ends.
func rebootstrapOnLeadership(ctx context.Context, log *slog.Logger, node *cluster.Node, tasks []leaderTask) {
	done := node.IsLeader() // the start-up bootstrap covered this term
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !node.IsLeader() {
			done = false
			continue
		}
		if done {
			continue
		}
		done = true
		for _, task := range tasks {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := task(rctx)
			cancel()
			if err != nil {
				// Try again on the next tick while this node still leads.
				log.Warn("re-running a bootstrap task as the new leader", "error", err)
				done = false
				break
			}
		}
	}
}

// multiNode says whether this node takes part in gossip: it expects peers
// or was told where to find them.
func (o *options) multiNode() bool { return o.bootstrapExpect > 1 || o.join != "" }

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// advertised is the address peers use for this node's API: the listen
// address, with an unspecified host replaced by loopback.
func advertised(listen string) string {
	return strings.TrimPrefix(apiURL(listen, hostOf(listen)), "https://")
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// readGossipKey reads <ca-dir>/gossip.key (trustplane certs init writes it).
func readGossipKey(caDir string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(caDir, gossipKeyFile))
	if err != nil {
		return nil, fmt.Errorf("gossip key (create it with trustplane certs init --dir %s): %w", caDir, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("gossip key %s: want base64 of 32 bytes", filepath.Join(caDir, gossipKeyFile))
	}
	return key, nil
}

// membership adapts the cluster's member view to the API's.
type membership struct {
	node *cluster.Node
	// clusterID is the cluster CA's id, recorded in snapshots (snapshot.go).
	clusterID string
}

func (m membership) Members(ctx context.Context) ([]api.Member, error) {
	ms, err := m.node.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Member, len(ms))
	for i, c := range ms {
		out[i] = api.Member{
			Name: c.Name, RaftAddr: c.RaftAddr, APIAddr: c.APIAddr, Voter: c.Voter, Status: c.Status,
			RaftState: c.RaftState, LastContact: c.LastContact, AppliedIndex: c.AppliedIndex,
		}
	}
	return out, nil
}

// LeaderContactWithin is api.LeaderContact: the API bounds how stale its
// local reads may be (--max-stale-read).
func (m membership) LeaderContactWithin(d time.Duration) bool { return m.node.LeaderContactWithin(d) }

func (m membership) RemoveMember(ctx context.Context, name string) error {
	return m.node.RemoveMember(ctx, name)
}

// InConfiguration is api.ConfigurationMember: the API refuses
// resourceVersion=0 reads and watches while it is false.
func (m membership) InConfiguration() bool { return m.node.InConfiguration() }

// RaftStatus is api.RaftReporter (GET /debug/trustplane/raft).
func (m membership) RaftStatus() api.RaftStatus {
	s := m.node.Status()
	return api.RaftStatus{
		Node: s.Node, State: s.State, Term: s.Term, Leader: s.Leader,
		LeaderChanges: s.LeaderChanges, Elections: s.Elections,
		CommitIndex: s.CommitIndex, AppliedIndex: s.AppliedIndex, LastContact: api.ContactAge(s.LastContact),
	}
}

// backend joins the node (writes, read index) and the fsm (local reads) into
// what the storage layer needs (storage.Backend).
type backend struct {
	node *cluster.Node
	fsm  *fsm.FSM
}

func (b backend) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	res, err := b.node.Propose(ctx, cmd)
	if errors.Is(err, cluster.ErrTimeout) || errors.Is(err, cluster.ErrLeadershipLost) || errors.Is(err, cluster.ErrShutdown) {
		// The entry may have been handed to raft: its outcome is unknown.
		err = fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, err)
	}
	return res, err
}
func (b backend) ReadIndex(ctx context.Context) (uint64, error) { return b.node.ReadIndex(ctx) }
func (b backend) AppliedIndex() uint64                          { return b.fsm.AppliedIndex() }
func (b backend) WaitApplied(ctx context.Context, index uint64) error {
	return b.fsm.WaitApplied(ctx, index)
}
func (b backend) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) { return b.fsm.Get(key, rev) }
func (b backend) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return b.fsm.List(p, opts)
}

// loadNodeCA loads the node CA from caDir. A node of a multi-node cluster
// must share it with its peers, so it never creates one: the operator runs
// `trustplane certs init` (which adds a missing node CA to an existing CA
// directory). A one-node cluster creates its own.
func loadNodeCA(caDir string, multiNode bool) (*certs.CA, error) {
	if !multiNode {
		ca, err := certs.LoadOrCreateNodeCA(caDir)
		if err != nil {
			return nil, fmt.Errorf("node CA: %w", err)
		}
		return ca, nil
	}
	ca, err := certs.LoadNodeCA(caDir)
	if errors.Is(err, certs.ErrCANotFound) {
		return nil, fmt.Errorf("node CA: %w; every node of a cluster needs the same node CA: run `trustplane certs init --dir %s` once and copy the directory to every node", err, caDir)
	}
	if err != nil {
		return nil, fmt.Errorf("node CA: %w", err)
	}
	return ca, nil
}

// refuseNodeCASigners refuses to start when a CSR signer is configured
// with the node CA: whoever could get a CSR signed would become a node.
func refuseNodeCASigners(nodeCA *certs.CA, s controllers.Signers) error {
	for name, f := range map[string]controllers.SignerFiles{
		"kube-apiserver-client": s.KubeAPIServerClient, "kube-apiserver-client-kubelet": s.KubeAPIServerClientKubelet, "kubelet-serving": s.KubeletServing,
	} {
		pemBytes, err := os.ReadFile(f.CertFile)
		if err != nil {
			return fmt.Errorf("%s signer CA: %w", name, err)
		}
		if certs.HoldsCert(pemBytes, nodeCA.Cert) {
			return fmt.Errorf("the %s signer is configured with the node CA (%s); no signer may use it, because its certificates would be node identities", name, f.CertFile)
		}
	}
	return nil
}

// servingRequest is the API's serving certificate: kube's names for the
// kubernetes Service, loopback, the node name and hosts (the listen host,
// the advertised address and --tls-san). EnsurePair reissues the stored
// pair whenever one of these is missing from it, so a node restarted with
// another address (a pod's new IP) or new --tls-san names gets a matching
// certificate on its next start.
func servingRequest(nodeName string, clusterIP net.IP, hosts ...string) certs.Request {
	r := certs.Request{
		CommonName:  "trustplane-apiserver",
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), clusterIP},
		Server:      true,
	}
	r.AddHost(nodeName)
	for _, h := range hosts {
		r.AddHost(h)
	}
	return r
}

// validateTLSSANs checks --tls-san: every entry an IP address or a DNS
// name (a leading "*." wildcard allowed), as a certificate SAN must be.
func validateTLSSANs(list string) error {
	for _, h := range splitList(list) {
		if net.ParseIP(h) != nil {
			continue
		}
		errs := validation.IsDNS1123Subdomain(h)
		if strings.HasPrefix(h, "*.") {
			errs = validation.IsWildcardDNS1123Subdomain(h)
		}
		if len(errs) > 0 {
			return fmt.Errorf("--tls-san %q: neither an IP address nor a DNS name: %s", h, strings.Join(errs, "; "))
		}
	}
	return nil
}

// firstServiceIP is the first host address of the service range, the
// ClusterIP kube-apiserver gives default/kubernetes.
func firstServiceIP(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	ip := make(net.IP, len(n.IP))
	copy(ip, n.IP)
	ip[len(ip)-1]++
	if !n.Contains(ip) {
		return nil, fmt.Errorf("--service-cluster-ip-range %s has no host addresses", cidr)
	}
	return ip, nil
}

// apiURL is the URL clients use: the bound address, with an unspecified
// listen host replaced by loopback.
func apiURL(bound, listenHost string) string {
	host, port, _ := net.SplitHostPort(bound)
	if ip := net.ParseIP(listenHost); ip == nil || !ip.IsUnspecified() {
		host = listenHost
	} else {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, port)
}

func writeAdminKubeconfig(ca *certs.CA, pki, path, server string) error {
	cert, key, err := ca.Issue(certs.Request{CommonName: "trustplane-admin", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	return certs.WriteKubeconfig(path, certs.Kubeconfig{
		Server: server, ClusterName: "trustplane", UserName: "trustplane-admin",
		CAPEM: ca.CertPEM, CertPEM: cert, KeyPEM: key,
	})
}

// versionString is what `trustplane version` prints. A binary built with
// -tags failpoints says so (" +failpoints"): the chaos tool checks for it
// before relying on <data-dir>/failpoints.
func versionString() string {
	v := "trustplane " + api.Version.GitVersion
	if failpoint.Enabled {
		v += " +failpoints"
	}
	return v
}
