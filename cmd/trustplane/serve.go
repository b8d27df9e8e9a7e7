package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/server/healthz"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/caroots"
	"github.com/trustplane/trustplane/api/encryptionkeys"
	"github.com/trustplane/trustplane/api/gossipkeys"
	"github.com/trustplane/trustplane/api/jwtsign"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/gctune"
	"github.com/trustplane/trustplane/watchcache"
)

// options are the serve flags.
type options struct {
	dataDir         string
	listen          string
	raftAddr        string
	gossipAddr      string
	nodeName        string
	join            string
	bootstrapExpect int
	caDir           string
	tlsSANs         string
	runtimeConfig   string
	featureGates    string
	emulatedVersion string
	emulated        *version.Version // emulatedVersion, parsed
	saIssuer        string
	serviceCIDR     string
	logLevel        string
	controllers     bool
	// role is --role: voter, or replica (cluster.Config.Replica).
	role string
	// executeWrites is --execute-writes: leader (followers forward
	// writes as HTTP) or local (every node executes its writes and has
	// the leader only order their commands).
	executeWrites    string
	controllersQPS   float64
	controllersBurst int
	signing          signingFlags
	authn            authnFlags // --authentication-config, --oidc-* (authnconfig.go)
	advertise        advertiseFlags
	addrs            addresses   // resolved from advertise
	atRest           atRestFlags // data at rest (atrest.go)
	limits           limitFlags
	audit            auditFlags // the audit log (audit.go)
	events           eventFlags // --event-ttl (events.go)

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
	// shutdownDelay and livezGrace are kube-apiserver's
	// --shutdown-delay-duration and --livez-grace-period (lifecycle.go).
	shutdownDelay    time.Duration
	livezGrace       time.Duration
	maxStaleRead     time.Duration
	watchWindow      time.Duration
	compactRetention time.Duration
	compactInterval  time.Duration

	// gcPercent is the collector's GOGC that serve sets when setGC is
	// true: not when the environment sets GOGC and the flag was not given
	// (gc.go).
	gcPercent int
	setGC     bool
	// gcFloor is the least the heap may grow by between collections
	// (gctune.Config.Floor), from --gc-min-headroom.
	gcFloor uint64
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
	fs.StringVar(&o.role, "role", "voter", "voter, or replica: a read replica joins the cluster at --join as a Raft non-voter, receives the log and serves reads, reviews and watches from its own state, but never votes, never counts toward a quorum, never leads and never runs controllers")
	fs.IntVar(&o.bootstrapExpect, "bootstrap-expect", 1, "servers to see before the first election (1 bootstraps a one-node cluster; with --join the default is 0: join an existing cluster)")
	fs.StringVar(&o.caDir, "ca-dir", "", "shared cluster CA directory (default <data-dir>/pki, generated when absent)")
	fs.StringVar(&o.tlsSANs, "tls-san", "", "extra DNS names or IP addresses for the API's serving certificate, comma-separated (k3s' --tls-san): the names clients reach the node by, such as a Service's DNS names")
	fs.StringVar(&o.executeWrites, "execute-writes", "local", "where a write that reaches a follower or replica runs: local (the node runs it, admission and webhooks included, and sends only the resulting command to the leader over the internal RPC) or leader (forwarded to the leader as an HTTP request, which the leader runs again); operator actions and member removal always run on the leader")
	fs.StringVar(&o.runtimeConfig, "runtime-config", "", "enable or disable API versions and resources, kube-apiserver's syntax: api/all=false,v1=true,certificates.k8s.io/v1beta1=true,rbac.authorization.k8s.io/v1/roles=false,...")
	fs.StringVar(&o.emulatedVersion, "emulated-version", "", "the release whose APIs, feature gate defaults and CEL libraries the node emulates, kube-apiserver's syntax: 1.32 or kube=1.32 (from 1.31 to 1.33, the default)")
	fs.StringVar(&o.featureGates, "feature-gates", "", "kube-apiserver's feature gates, Name=true|false,... (honoured: APIResponseCompression, WatchList, AuthorizeWithSelectors, ClusterTrustBundle, StructuredAuthenticationConfiguration, AnonymousAuthConfigurableEndpoints)")
	fs.StringVar(&o.saIssuer, "service-account-issuer", authn.DefaultIssuer, "service account token issuer URL (the \"iss\" of issued tokens and the API audience)")
	fs.StringVar(&o.tokenAuthFile, "token-auth-file", "", "static bearer tokens, kube's CSV format: token,user,uid[,\"group1,group2\"]")
	fs.DurationVar(&o.saMaxTokenExpiration, "service-account-max-token-expiration", 0, "longest validity of a token from the TokenRequest API; longer requests are shortened to it (0: no cap; else between 1h and 2^32s)")
	fs.BoolVar(&o.saExtendTokenExpiration, "service-account-extend-token-expiration", true, "issue pod-bound tokens requested for 3607s (the kubelet's transition value) for a year, as kube-apiserver does")
	fs.StringVar(&o.serviceCIDR, "service-cluster-ip-range", "10.96.0.0/12", "range whose first address is the ClusterIP of default/kubernetes")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.signing.register(fs)
	o.authn.register(fs)
	o.advertise.register(fs)
	o.atRest.register(fs)
	o.limits.register(fs)
	o.audit.register(fs)
	o.events.register(fs)
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
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay-duration", 0, "on SIGTERM/SIGINT, keep serving this long with /readyz failing (/livez and /healthz still pass), so that load balancers stop sending traffic before the node stops; a second signal ends the delay (kube-apiserver's flag)")
	fs.DurationVar(&o.livezGrace, "livez-grace-period", 0, "from the start, how long /livez reports its checks as passing whatever they say: the time the node may take to start (kube-apiserver's flag)")
	fs.DurationVar(&o.maxStaleRead, "max-stale-read", 5*time.Second, "a node that has not heard from a leader for longer serves no watch, authenticates and authorises requests (but for its health, metrics and Raft status) and serves the service account JWKS only once caught up with the leader (503 when it cannot), and answers resourceVersion=0 reads as linearizable ones (503 when it is cut off) instead of from its own, possibly old, state (0: no bound)")
	fs.DurationVar(&o.compactRetention, "compact-retention", d.CompactRetention, "MVCC history kept for exact reads, continue tokens and watch history across restarts; older gets 410 Gone")
	fs.DurationVar(&o.compactInterval, "compact-interval", d.CompactInterval, "how often the leader compacts history")
	fs.DurationVar(&o.watchWindow, "watch-cache-window", watchcache.DefaultConfig().Window, "how much watch history each node keeps; older resourceVersions get 410 Gone")
	fs.IntVar(&o.gcPercent, "gc-percent", defaultGCPercent, "the garbage collector's GOGC for a large live heap: how far the heap grows past what is live before a collection, in percent; lower holds less memory for more CPU (negative: off). Not applied when the environment sets GOGC and the flag is not given")
	gcFloor := fs.String("gc-min-headroom", defaultGCMinHeadroom, "the least the heap may grow by between collections: while --gc-percent of the live heap is less, the percentage rises towards 300, so a small store pays little collector CPU to save memory it does not need")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := envTwins(fs); err != nil {
		return nil, err
	}
	if err := o.authn.parsed(fs); err != nil {
		return nil, err
	}
	o.gcPercent, o.setGC = gcPercent(fs, o.gcPercent, os.LookupEnv)
	floor, ferr := parseBytes(*gcFloor)
	if ferr != nil {
		return nil, fmt.Errorf("--gc-min-headroom: %w", ferr)
	}
	o.gcFloor = floor
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
	switch o.role {
	case "voter":
	case "replica":
		if o.join == "" || o.bootstrapExpect == 1 {
			return nil, errors.New("--role replica: a replica joins an existing cluster: it needs --join, and --bootstrap-expect must not be 1")
		}
	default:
		return nil, fmt.Errorf("--role %q: want voter or replica", o.role)
	}
	if o.executeWrites != "leader" && o.executeWrites != "local" {
		return nil, fmt.Errorf("--execute-writes %q: want leader or local", o.executeWrites)
	}
	if o.bootstrapExpect < 0 {
		return nil, fmt.Errorf("--bootstrap-expect %d: must not be negative", o.bootstrapExpect)
	}
	if o.nodeName == "" {
		return nil, errors.New("--node-name is required")
	}
	if o.shutdownDelay < 0 {
		return nil, errors.New("--shutdown-delay-duration can not be negative value")
	}
	if o.livezGrace < 0 {
		return nil, errors.New("--livez-grace-period can not be a negative value")
	}
	var err error
	if o.emulated, err = checkEmulatedVersion(o.emulatedVersion); err != nil {
		return nil, err
	}
	if err := checkFeatureGates(o.featureGates); err != nil {
		return nil, err
	}
	if _, err := parseRuntimeConfig(o.runtimeConfig, nil, o.emulated); err != nil {
		return nil, err
	}
	if err := o.events.check(); err != nil {
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
	if err := o.audit.validate(); err != nil {
		return nil, err
	}
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
	if err := applyEmulatedVersion(o.emulatedVersion); err != nil {
		return err
	}
	if err := applyFeatureGates(gatesFor(o.featureGates, o.runtimeConfig, o.emulated)); err != nil {
		return err
	}
	if o.setGC {
		gctune.Start(gctune.Config{Percent: o.gcPercent, Floor: o.gcFloor, OnChange: func(pct int, live uint64) {
			log.Info("garbage collector percentage", "gogc", pct, "liveHeapMiB", live>>20)
		}})
	}

	privateFiles() // data at rest (atrest.go): 0600 files, 0700 directories
	scfg := storage.DefaultConfig()
	fileTransformers, err := o.atRest.fileTransformers()
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
	clusterID, err := clusterIDAtStart(o.dataDir, caDir, ca)
	if err != nil {
		return fmt.Errorf("cluster id: %w", err)
	}
	clusterIP, err := firstServiceIP(o.serviceCIDR)
	if err != nil {
		return err
	}
	listenHost, listenPort, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	// The cluster CAs and the serving certificate follow the replicated
	// set live (api/caroots), as the node CAs and the node certificate do.
	clusterRootsAtStart, clusterTrustRev, err := casAtStart(log, caroots.ClusterKind, ca, filepath.Join(caDir, certs.CACertFile), filepath.Join(o.dataDir, clusterTrustFile))
	if err != nil {
		return err
	}
	clusterRoots := certs.NewRoots("cluster-cas", clusterRootsAtStart...)
	servingReq := servingRequest(o.nodeName, clusterIP, append([]string{listenHost, o.advertise.address}, splitList(o.tlsSANs)...)...)
	servingPair, err := certAtStart(caroots.ClusterKind, ca, clusterRootsAtStart, filepath.Join(pki, "apiserver.crt"), filepath.Join(pki, "apiserver.key"), servingReq)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	serving := certs.NewNodeCert(servingPair)
	if err := clusterSignerAtStart(pki, ca); err != nil {
		return fmt.Errorf("the default signers' CA: %w", err)
	}
	raftHost, _, err := net.SplitHostPort(o.raftAddr)
	if err != nil {
		return fmt.Errorf("--raft-addr: %w", err)
	}
	nodeCA, err := loadNodeCA(caDir, o.multiNode())
	if err != nil {
		return err
	}
	nodeRoots, nodeTrustRev, err := casAtStart(log, caroots.NodeKind, nodeCA, filepath.Join(caDir, certs.NodeCACertFile), filepath.Join(o.dataDir, nodeTrustFile))
	if err != nil {
		return err
	}
	nodes := certs.NewNodeVerifier(nodeCA)
	nodes.SetRoots(nodeRoots)
	nodeReq := certs.NodeRequest(o.nodeName, raftHost, hostOf(o.addrs.raft))
	nodePair, err := certAtStart(caroots.NodeKind, nodeCA, nodeRoots, filepath.Join(pki, "node.crt"), filepath.Join(pki, "node.key"), nodeReq)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	nodeCert := certs.NewNodeCert(nodePair)

	// Every resource gets a store; --runtime-config and the feature gates
	// decide below which of them clients see. The fsm knows them all
	// before it reads the log (builtinKeys).
	resources := append(append(registry.CoreResources(), authzResources()...), registry.CertificateResources("v1beta1", "v1alpha1")...)
	resources = append(append(resources, o.events.resources()...), registry.LeaseResources()...)
	resources = append(append(resources, registry.CustomResourceDefinitionResources()...), registry.WebhookConfigurationResources()...)
	builtin := builtinKeys(append(append(resources[:len(resources):len(resources)], registry.AdmissionPolicyResources(nil, nil)...),
		registry.MutatingAdmissionPolicyResources(nil, nil)...))
	f := fsm.NewWithConfig(fsm.Config{Builtin: builtin})
	ccfg := cluster.DefaultConfig()
	ccfg.NodeName = o.nodeName
	ccfg.DataDir = o.dataDir
	ccfg.RaftAddr = o.raftAddr
	ccfg.RaftAdvertise = o.addrs.raft
	ccfg.BootstrapExpect = o.bootstrapExpect
	ccfg.Replica = o.role == "replica"
	if o.executeWrites == "local" {
		// A node executing writes answers one once the leader committed
		// it, and its next write waits until it has applied it, which
		// waits for the node to learn the leader's commit index
		// (cluster.Config.CommitTimeout).
		ccfg.CommitTimeout = 5 * time.Millisecond
	}
	ccfg.LeaderWait = o.writeLeaderWait
	ccfg.TLS = nodes.PeerTLS(nodeCert)
	ccfg.PeerName = nodes.ConnNodeName
	ccfg.Logger = log.With("component", "cluster")
	ccfg.SnapshotThreshold = o.snapshotThreshold
	ccfg.SnapshotInterval = o.snapshotInterval
	ccfg.TrailingLogs = o.trailingLogs
	ccfg.DeadServerTimeout = o.deadServerTimeout
	ccfg.CompactRetention = o.compactRetention
	ccfg.Features = []string{encryptionkeys.Feature, caroots.NodeKind.Feature, caroots.ClusterKind.Feature, caroots.SignerKind("").Feature}
	ccfg.Version = trustplane.Version()
	ccfg.Formats = trustplane.FormatReads()
	ccfg.Facts = func() map[string]string {
		facts := caroots.Facts(caroots.NodeKind, nodes, nodeCert)
		if facts == nil {
			facts = map[string]string{}
		}
		maps.Copy(facts, caroots.Facts(caroots.ClusterKind, clusterRoots, serving))
		return facts
	}
	ccfg.CompactInterval = o.compactInterval
	o.limits.setCluster(ccfg)
	if o.multiNode() {
		primary, more, err := gossipKeysAtStart(log, caDir, o.dataDir)
		if err != nil {
			return err
		}
		ccfg.GossipAddr = o.gossipAddr
		ccfg.GossipAdvertise = o.addrs.gossip
		ccfg.GossipKey, ccfg.GossipKeys = primary, more
		ccfg.Join = splitList(o.join)
		ccfg.APIAddr = o.addrs.api
		ccfg.ClusterID = clusterID
	}
	node, err := cluster.New(ccfg, f)
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	defer node.Shutdown()

	back := backend{node: node, fsm: f}
	encKeys := encryptionKeys(log, fileTransformers, back, node, f)
	scfg.Transformers = encKeys.Transformers()
	o.limits.setStorage(scfg)
	scfg.Feed = f
	scfg.Builtin = builtin
	// The internal records that hold secret material, sealed as Secrets.
	scfg.SealedInternal = []string{authn.SigningKeysResource, cluster.GossipKeysResource, cluster.NodeCAsResource, cluster.ClusterCAsResource}
	for _, signer := range builtinSigners {
		scfg.SealedInternal = append(scfg.SealedInternal, caroots.SignerKind(signer).Resource)
	}
	scfg.Watch = watchcache.DefaultConfig()
	scfg.Watch.Window = o.watchWindow
	o.limits.setWatchCache(scfg.Watch)
	// The storage layer, which writes API objects only, submits them from
	// any node when writes run where they arrive; every other writer of
	// the log (internal records) proposes as leader (back).
	stor, err := storage.New(scfg, backend{node: node, fsm: f, submit: o.executeWrites == "local"})
	if err != nil {
		return err
	}
	defer stor.Close()
	az, err := setupAuthz(f, stor, log)
	if err != nil {
		return err
	}
	adm, err := newAdmission(az.authorizer, o.controllers)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	o.limits.setAdmission(adm)
	resources = append(resources, adm.policies.resources()...)
	reg := registry.New(stor, resources, admissionChain{az.authorizer, adm})
	wired := &wiring{opts: o, log: log, ca: ca, pki: pki, caDir: caDir, node: node, fsm: f, reg: reg, back: back}
	ident, err := setupIdentity(wired)
	if err != nil {
		return err
	}
	if err := az.register(reg); err != nil {
		return err
	}
	var bootstrapped, shuttingDown atomic.Bool
	port, _ := strconv.Atoi(listenPort)

	// The signers with CA files of their own follow their replicated
	// CAs, seeded by the files, as the cluster CA does.
	signerCAs, err := signerCAsAtStart(log, &o.signing, o.dataDir, pki)
	if err != nil {
		return err
	}
	if err := refuseNodeCASigners(nodes.Roots(), o.signing.signers(pki)); err != nil {
		return err
	}
	lb, err := newLoopback(clusterRoots)
	if err != nil {
		return err
	}
	// Client certificates of the cluster CAs, of the client signers' own
	// CAs and of this process's loopback CA authenticate; so do node
	// certificates (a follower forwarding a write), whose assertions
	// acfg.Nodes decides. The cluster, signer and node CAs change live
	// (api/caroots), and the pool with them.
	clientCAs := newLiveClientCAs(append(signerBundles(signerCAs), clusterRoots, nodes.Trust(), lb.bundle())...)
	nodeCAs := setupCARoot(wired, caRoot{
		kind: caroots.NodeKind, trust: nodes, cert: nodeCert, req: nodeReq,
		certFile: filepath.Join(pki, "node.crt"), keyFile: filepath.Join(pki, "node.key"),
		trustFile: filepath.Join(o.dataDir, nodeTrustFile), trustRev: nodeTrustRev,
		reconnect: node.Reconnect,
		forbidden: func() []*x509.Certificate { return append(clusterRoots.Roots(), signerRoots(signerCAs)()...) },
	})
	followCA := newCAFollower(wired, clusterRoots, signerCAs)
	setupSignerCAs(wired, signerCAs, followCA, nodes.Roots)
	clusterCAs := setupCARoot(wired, caRoot{
		kind: caroots.ClusterKind, trust: clusterRoots, cert: serving, req: servingReq,
		certFile: filepath.Join(pki, "apiserver.crt"), keyFile: filepath.Join(pki, "apiserver.key"),
		trustFile: filepath.Join(o.dataDir, clusterTrustFile), trustRev: clusterTrustRev,
		onChange:  followCA.onChange,
		forbidden: func() []*x509.Certificate { return append(nodes.Roots(), signerRoots(signerCAs)()...) },
	})
	acfg := api.DefaultConfig()
	acfg.Listen = o.listen
	acfg.Logger = log.With("component", "api")
	o.limits.setAPI(acfg)
	acfg.TLS = &tls.Config{
		// A node calling this API asks for NodeServerName and gets the
		// node certificate, so it can check that it reached a node; every
		// other client gets the serving certificate of the moment.
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == certs.NodeServerName {
				return nodeCert.Get(), nil
			}
			return serving.Get(), nil
		},
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  clientCAs.pool(),
		MinVersion: tls.VersionTLS12,
	}
	acfg.ClientCAs = clientCAs.pool
	acfg.Nodes = nodes
	acfg.Components = lb.issued
	acfg.NoWatchList = !utilfeature.DefaultFeatureGate.Enabled(genericfeatures.WatchList)
	acfg.LivezChecks = delayedChecks(o.livezGrace, clock.RealClock{},
		healthz.PingHealthz,
		healthz.NamedCheck("raft", func(*http.Request) error { return node.CheckRunning() }),
	)
	acfg.ReadyzChecks = []healthz.HealthChecker{
		healthz.PingHealthz,
		healthz.NamedCheck("raft-leader", func(*http.Request) error { return node.CheckLeader() }),
		healthz.NamedCheck("fsm-caught-up", func(*http.Request) error { return caughtUp(node, o.maxStaleRead) }),
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
	acfg.Membership = membership{node: node, clusterID: clusterID}
	acfg.MaxStaleRead = o.maxStaleRead
	acfg.CatchUp = wired.catchUp
	acfg.Authenticator = ident.authenticator
	acfg.Anonymous = ident.anonymous
	acfg.Posts = map[string]http.Handler{jwtsign.Path: jwtsign.Handler(jwtsign.Config{
		Signer: ident.keys, Authorizer: az.authorizer, OwnIssuers: ident.issuers, MaxLifetime: o.saMaxTokenExpiration,
	})}
	acfg.Paths = ident.paths
	acfg.Actions = ident.actions
	acfg.Authorizer = az.authorizer
	// Every trust root rotated online: its steps, its metrics, an Event
	// per step.
	roots := map[string]rotation.Root{authn.SigningKeyRoot: ident.keys.Root(), encryptionkeys.Root: encKeys.Root(f.Export, stor.AtRestOf), caroots.NodeKind.Root: nodeCAs.Root(), caroots.ClusterKind.Root: clusterCAs.Root()}
	counters := map[string]rotation.Counter{authn.SigningKeyRoot: ident.keys.PhaseCounts, encryptionkeys.Root: encKeys.PhaseCounts, caroots.NodeKind.Root: nodeCAs.PhaseCounts, caroots.ClusterKind.Root: clusterCAs.PhaseCounts}
	for _, sc := range signerCAs {
		roots[sc.store.Kind().Root], counters[sc.store.Kind().Root] = sc.store.Root(), sc.store.PhaseCounts
	}
	var gossipKeys *gossipkeys.Store
	if o.multiNode() {
		gossipKeys = setupGossipKeys(wired)
		roots[gossipkeys.Root], counters[gossipkeys.Root] = gossipKeys.Root(), gossipKeys.PhaseCounts
	}
	rotEvents := &rotationEvents{log: log.With("component", "rotation"), node: o.nodeName}
	for p, h := range rotation.Handlers(roots, rotEvents) {
		acfg.Actions[p] = h
	}
	acfg.Collectors = append(nodeCollectors(node), rotation.Collector(counters), encKeys.Collector())
	auditLog, err := o.audit.open(log, acfg)
	if err != nil {
		return err
	}
	defer auditLog.Close()
	if o.multiNode() {
		acfg.Forward = &api.ForwardConfig{
			Leadership:     node,
			TLS:            nodes.ClientTLS(nodeCert),
			Credentials:    func() any { return nodeCert.Get() },
			WaitForLeader:  o.writeLeaderWait,
			ExecuteLocally: o.executeWrites == "local",
		}
	}
	rc, err := parseRuntimeConfig(o.runtimeConfig, servedAPIs(reg), emulatedVersion())
	if err != nil {
		return err
	}
	served := reg.Serving(apiSelection{rc: rc, gates: utilfeature.DefaultFeatureGate}.serves)
	srv, err := api.New(acfg, adm.policies.serving(served))
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	admissionCtx, stopAdmission := context.WithCancel(context.Background())
	defer stopAdmission()
	if err := adm.start(admissionCtx, lb, apiURL(srv.Addr().String(), listenHost)); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	loopback, err := lb.config(apiURL(srv.Addr().String(), listenHost), loopbackUser, "system:masters")
	if err != nil {
		return err
	}
	if err := rotEvents.use(loopback); err != nil {
		return err
	}
	if served.Store(registry.CustomResourceDefinitionsGVR) != nil {
		if err := newCustomResources(log, served, srv).start(admissionCtx, loopback); err != nil {
			return fmt.Errorf("custom resources: %w", err)
		}
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	log.Info("serving the API", "address", srv.Addr().String(), "node", o.nodeName, "data-dir", o.dataDir)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		tasks := append(append([]leaderTask{func(ctx context.Context) error { return reg.Bootstrap(ctx, clusterIP, int32(port)) }},
			az.bootstrap...), ident.bootstrap...)
		if gossipKeys != nil {
			tasks = append(tasks, seedGossipKeys(gossipKeys, ccfg.GossipKey))
			go gossipKeys.Run(ctx)
		}
		go runEncryptionKeys(ctx, encKeys, f, stor, node, o.atRest.rewriteRate)
		tasks = append(tasks, func(ctx context.Context) error { return encKeys.ResealInternal(ctx, f.Export, stor.AtRestOf) }, seedCARoot(nodeCAs, nodeCA), seedCARoot(clusterCAs, ca))
		for _, sc := range signerCAs {
			tasks = append(tasks, seedCARoot(sc.store, sc.seed))
			go sc.store.Run(ctx)
		}
		go nodeCAs.Run(ctx)
		go clusterCAs.Run(ctx)
		go ident.authConfig.Run(ctx)
		served, err := bootstrap(ctx, log, node, f, tasks)
		if err != nil {
			return
		}
		bootstrapped.Store(true)
		go rebootstrapOnLeadership(ctx, log, node, tasks, served)
		go runControllers(ctx, wired, ident, apiURL(srv.Addr().String(), listenHost), lb, followCA)
		go runEventExpiry(ctx, log, node, stor)
		kubeconfig := filepath.Join(o.dataDir, "admin.kubeconfig")
		followCA.server = apiURL(srv.Addr().String(), listenHost)
		if followCA.active.Load() == nil {
			followCA.active.CompareAndSwap(nil, activeAtStart(pki, clusterRoots, ca))
		}
		followCA.ready.Store(true)
		if err := followCA.writeKubeconfig(); err != nil {
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
	if err := delayShutdown(log, o.shutdownDelay, serveErr); err != nil {
		return err
	}
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

// multiNode says whether this node takes part in gossip: it expects peers
// or was told where to find them.
func (o *options) multiNode() bool { return o.bootstrapExpect > 1 || o.join != "" }
