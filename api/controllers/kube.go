package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	certificatesinformers "k8s.io/client-go/informers/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/certificates/approver"
	"k8s.io/kubernetes/pkg/controller/certificates/cleaner"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
	"k8s.io/kubernetes/pkg/controller/certificates/signer"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	kubeserviceaccount "k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/certs"
)

// The controllers' names, as kube-controller-manager's client builder
// names their ServiceAccounts in kube-system.
const (
	ServiceAccountController         = "service-account-controller"
	RootCACertPublisher              = "root-ca-cert-publisher"
	ClusterRoleAggregationController = "clusterrole-aggregation-controller"
	// TokensController runs as the root identity (KubeControllerManagerUser),
	// as kube-controller-manager's tokens controller does.
	TokensController = "tokens-controller"
	// CertificateController is the ServiceAccount kube's CSR signing,
	// approving and cleaning controllers act as.
	CertificateController = "certificate-controller"
	// GarbageCollector deletes dependents whose owners are gone and runs
	// the foregroundDeletion and orphan finalizers.
	GarbageCollector = "generic-garbage-collector"
	// NamespaceController empties a terminating namespace and then removes
	// its kubernetes finalizer.
	NamespaceController = "namespace-controller"
	// TrustBundlePublisher publishes the signers' ClusterTrustBundles, as
	// kube-controller-manager's kube-apiserver-serving publisher does.
	TrustBundlePublisher = "kube-apiserver-serving-clustertrustbundle-publisher"
)

// KubeControllerManagerUser is the root identity of kube-controller-manager:
// the shared informers and the tokens controller use it, and kube's
// bootstrap policy binds it to the system:kube-controller-manager role.
const KubeControllerManagerUser = user.KubeControllerManager

// Identity is the user a controller authenticates as.
type Identity struct {
	User   string
	Groups []string
}

// ControllerIdentity is the identity kube-controller-manager gives the
// controller called name (with --use-service-account-credentials): the
// ServiceAccount kube-system/<name>.
func ControllerIdentity(name string) Identity {
	return Identity{
		User:   serviceaccount.MakeUsername("kube-system", name),
		Groups: serviceaccount.MakeGroupNames("kube-system"),
	}
}

// Issuer makes the controllers' client certificates.
type Issuer interface {
	// Issue returns a new client certificate and its key, signed by the CA
	// the API trusts for client certificates (CN = user, O = groups). The
	// controllers call it once per identity at the start of each term and
	// keep the key in memory only, so it must not write anything out.
	Issue(r certs.Request) (certPEM, keyPEM []byte, err error)
}

// KubeConfig configures Kube.
type KubeConfig struct {
	// Host is the URL of this node's own API (https://host:port).
	Host string
	// CAPEM returns the cluster CAs in PEM form: the roots the clients
	// trust for the API's serving certificate, the ca.crt the root CA
	// publisher puts in every namespace, and the ca.crt of token Secrets.
	// Each term reads it once, at its start; while the cluster CA rotates
	// it holds every CA the cluster trusts, and a step restarts the term
	// (Manager.Restart).
	CAPEM func() []byte
	// Issuer makes the controllers' client certificates.
	Issuer Issuer
	// TokenGenerator signs the non-expiring tokens the tokens controller
	// puts in kubernetes.io/service-account-token Secrets; nil turns the
	// tokens controller off (kube-controller-manager does the same without
	// --service-account-private-key-file).
	TokenGenerator kubeserviceaccount.TokenGenerator
	// Signers are the built-in CSR signers' CAs; a signer without files is
	// not run. kube-controller-manager's --cluster-signing-*-file flags.
	Signers Signers
	// TrustBundles returns, at the start of each term, the CA bundle (PEM)
	// each signer's ClusterTrustBundle publishes, by signer name; nil
	// publishes none. They are published only while the API serves
	// ClusterTrustBundles (v1beta1, else v1alpha1), as
	// kube-controller-manager publishes kube-apiserver-serving's.
	TrustBundles func() map[string][]byte
	// SigningDuration caps the lifetime of a signed certificate; a CSR's
	// spec.expirationSeconds may only shorten it
	// (--cluster-signing-duration, one year by default).
	SigningDuration time.Duration
	// UserAgent prefixes every controller's User-Agent; the controller's
	// name is appended after a slash, as kube-controller-manager does.
	UserAgent string
	// QPS and Burst limit each client (kube-controller-manager's
	// --kube-api-qps and --kube-api-burst).
	QPS   float32
	Burst int
	// Logger receives the controllers' logs; nil means slog.Default().
	Logger *slog.Logger
	// EstablishDelay is how long a CustomResourceDefinition whose names
	// are accepted waits before it is Established: kube's apiextensions
	// server waits 5 s when other servers run beside it, so that they
	// serve it first, and none when it runs alone.
	EstablishDelay time.Duration
	// CustomResources is the node's registry of custom resources, through
	// which the CRD finalizer deletes a definition's objects (by the
	// definition's UID, never by URL) and which says which stored
	// definitions it refuses to serve. Nil turns the apiextensions
	// controllers off.
	CustomResources CustomResources
}

// SignerFiles are a signing CA's certificate and key files (PEM). kube's
// signer reloads them when they change.
type SignerFiles struct {
	CertFile, KeyFile string
}

// Signers names the CA of each built-in signer.
type Signers struct {
	KubeAPIServerClient        SignerFiles // kubernetes.io/kube-apiserver-client
	KubeAPIServerClientKubelet SignerFiles // kubernetes.io/kube-apiserver-client-kubelet
	KubeletServing             SignerFiles // kubernetes.io/kubelet-serving
}

// DefaultKubeConfig returns kube-controller-manager's client defaults;
// Host, CAPEM and Issuer must still be set.
func DefaultKubeConfig() *KubeConfig {
	return &KubeConfig{UserAgent: "kube-controller-manager", QPS: 20, Burst: 30, SigningDuration: 365 * 24 * time.Hour}
}

// ValidateKubeConfig reports what makes c unusable.
func ValidateKubeConfig(c *KubeConfig) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: no config", ErrInvalidConfig)
	case c.Host == "":
		return fmt.Errorf("%w: no API Host", ErrInvalidConfig)
	case c.CAPEM == nil || !x509.NewCertPool().AppendCertsFromPEM(c.CAPEM()):
		return fmt.Errorf("%w: CAPEM holds no certificate", ErrInvalidConfig)
	case c.Issuer == nil:
		return fmt.Errorf("%w: no Issuer", ErrInvalidConfig)
	}
	return nil
}

// Kube runs kube-controller-manager's controllers against this node's API.
// It is a Runner: each Run is one term with fresh clients, informers and
// controllers.
type Kube struct {
	cfg KubeConfig
	log *slog.Logger
}

// NewKube returns the controllers for cfg.
func NewKube(cfg *KubeConfig) (*Kube, error) {
	if err := ValidateKubeConfig(cfg); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Kube{cfg: *cfg, log: log}, nil
}

// LeaseClient is Host's Client: a clientset for the controllers' lease as
// system:kube-controller-manager (kube-controller-manager's leader election
// runs as its root identity too), with a certificate issued now, and the
// close that ends its connections.
func (k *Kube) LeaseClient() (kubernetes.Interface, func(), error) {
	cl := &clients{k: k, caPEM: k.cfg.CAPEM()}
	cs, err := cl.forIdentity(Identity{User: KubeControllerManagerUser}, "leader-election")
	if err != nil {
		cl.close()
		return nil, nil, err
	}
	return cs, cl.close, nil
}

// TokensEnabled reports whether the tokens controller runs.
func (k *Kube) TokensEnabled() bool { return k.cfg.TokenGenerator != nil }

// clients makes one term's clientsets. Each identity gets its own HTTP
// transport, not client-go's process-wide transport cache (which would keep
// every term's certificates forever), and close closes every connection
// the term opened, so none outlives it.
type clients struct {
	k          *Kube
	caPEM      []byte // the term's CAPEM
	transports []*http.Transport
	conns      conns
}

// forIdentity is a clientset for id, with a client certificate issued now;
// name goes into the User-Agent.
func (c *clients) forIdentity(id Identity, name string) (*kubernetes.Clientset, error) {
	cfg, err := c.configFor(id, name)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", id.User, err)
	}
	return cs, nil
}

// configFor is the client configuration of id (what kube-controller-manager's
// client builder's ConfigFor returns), with a client certificate issued now
// and a transport of its own that the term closes; name goes into the
// User-Agent. Clients made from one configuration share its transport.
func (c *clients) configFor(id Identity, name string) (*rest.Config, error) {
	k := c.k
	certPEM, keyPEM, err := k.cfg.Issuer.Issue(certs.Request{CommonName: id.User, Organization: id.Groups, Client: true})
	if err != nil {
		return nil, fmt.Errorf("client certificate for %s: %w", id.User, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate for %s: %w", id.User, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	tr := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		DialContext:         c.conns.dial,
	})
	c.transports = append(c.transports, tr)
	cfg := &rest.Config{
		Host:      k.cfg.Host,
		Transport: tr,
		QPS:       k.cfg.QPS,
		Burst:     k.cfg.Burst,
		UserAgent: k.cfg.UserAgent + "/" + name,
	}
	// kube-controller-manager's --kube-api-content-type default.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg, nil
}

// close closes the term's connections, busy or idle, and refuses new
// ones; call it once the term's context has ended.
func (c *clients) close() {
	for _, tr := range c.transports {
		tr.CloseIdleConnections()
	}
	c.conns.closeAll()
}

// conns tracks the connections a term dials.
type conns struct {
	mu     sync.Mutex
	open   map[*trackedConn]struct{}
	closed bool
}

var dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

func (cs *conns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, owner: cs}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, errTermEnded)
	}
	if cs.open == nil {
		cs.open = map[*trackedConn]struct{}{}
	}
	cs.open[tc] = struct{}{}
	return tc, nil
}

func (cs *conns) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}

// trackedConn leaves its tracker when closed.
type trackedConn struct {
	net.Conn
	owner *conns
}

func (c *trackedConn) Close() error {
	c.owner.mu.Lock()
	delete(c.owner.open, c)
	c.owner.mu.Unlock()
	return c.Conn.Close()
}

// Run builds the controllers, runs them until ctx ends, and returns once
// the controllers' Run methods and the informers have stopped and the
// term's connections are closed. (kube's controllers do not wait for their
// own worker goroutines; those exit right after, on the cancelled context
// and shut-down queue. TestControllersLeaderOnly checks that no goroutine
// labelled with the term survives it.)
func (k *Kube) Run(ctx context.Context) error {
	logger := logr.FromSlogHandler(k.log.Handler())
	ctx = klog.NewContext(ctx, logger)

	cl := &clients{k: k, caPEM: k.cfg.CAPEM()}
	defer cl.close() // also on the error paths; closing twice is harmless
	// kube-controller-manager's shared informers list and watch as its
	// root identity: the controllers' own roles grant only their writes.
	rootCfg, err := cl.configFor(Identity{User: KubeControllerManagerUser}, "shared-informers")
	if err != nil {
		return err
	}
	root, err := kubernetes.NewForConfig(rootCfg)
	if err != nil {
		return fmt.Errorf("shared informers: %w", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(root, 0, informers.WithTransform(trimCached))
	// Resources the typed factory does not know are watched as metadata
	// only, as kube-controller-manager's ObjectOrMetadataInformerFactory does.
	rootMeta, err := metadata.NewForConfig(rootCfg)
	if err != nil {
		return fmt.Errorf("shared metadata informers: %w", err)
	}
	metaFactory := metadatainformer.NewSharedInformerFactoryWithOptions(rootMeta, 0, metadatainformer.WithTransform(trimCached))
	// informersStarted is closed once the factories have started, after
	// every controller registered its informers (kube-controller-manager's
	// InformersStarted): the garbage collector's monitors wait for it.
	informersStarted := make(chan struct{})

	var run []runnable

	saClient, err := cl.forIdentity(ControllerIdentity(ServiceAccountController), ServiceAccountController)
	if err != nil {
		return err
	}
	sac, err := serviceaccountcontroller.NewServiceAccountsController(
		factory.Core().V1().ServiceAccounts(), factory.Core().V1().Namespaces(),
		saClient, serviceaccountcontroller.DefaultServiceAccountsControllerOptions())
	if err != nil {
		return fmt.Errorf("%s: %w", ServiceAccountController, err)
	}
	run = append(run, runnable{ServiceAccountController, func(ctx context.Context) { sac.Run(ctx, 1) }})

	pubClient, err := cl.forIdentity(ControllerIdentity(RootCACertPublisher), RootCACertPublisher)
	if err != nil {
		return err
	}
	pub, err := rootcacertpublisher.NewPublisher(
		factory.Core().V1().ConfigMaps(), factory.Core().V1().Namespaces(), pubClient, cl.caPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", RootCACertPublisher, err)
	}
	run = append(run, runnable{RootCACertPublisher, func(ctx context.Context) { pub.Run(ctx, 1) }})

	aggClient, err := cl.forIdentity(ControllerIdentity(ClusterRoleAggregationController), ClusterRoleAggregationController)
	if err != nil {
		return err
	}
	agg := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), aggClient.RbacV1())
	run = append(run, runnable{ClusterRoleAggregationController, func(ctx context.Context) { agg.Run(ctx, 5) }})

	if k.cfg.TokenGenerator != nil {
		tokClient, err := cl.forIdentity(Identity{User: KubeControllerManagerUser}, TokensController)
		if err != nil {
			return err
		}
		tc, err := serviceaccountcontroller.NewTokensController(logger,
			factory.Core().V1().ServiceAccounts(), factory.Core().V1().Secrets(), tokClient,
			serviceaccountcontroller.TokensControllerOptions{TokenGenerator: k.cfg.TokenGenerator, RootCA: cl.caPEM})
		if err != nil {
			return fmt.Errorf("%s: %w", TokensController, err)
		}
		run = append(run, runnable{TokensController, func(ctx context.Context) { tc.Run(ctx, 5) }})
	} else {
		k.log.Warn("the tokens controller is off: no signing key for legacy service account tokens")
	}

	csrRun, err := k.certificateControllers(ctx, cl, factory)
	if err != nil {
		return err
	}
	run = append(run, csrRun...)

	bundleRun, err := k.trustBundleControllers(cl)
	if err != nil {
		return err
	}
	run = append(run, bundleRun...)

	policyRun, err := k.admissionPolicyControllers(cl, factory)
	if err != nil {
		return err
	}
	run = append(run, policyRun...)

	crdShutdown := func() {}
	if k.cfg.CustomResources != nil {
		var crdRun []runnable
		crdRun, crdShutdown, err = k.apiextensionsControllers(cl, logger)
		if err != nil {
			return err
		}
		run = append(run, crdRun...)
	}

	delRun, err := k.deletionControllers(ctx, cl, factory, informerfactory.NewInformerFactory(factory, metaFactory), informersStarted)
	if err != nil {
		return err
	}
	run = append(run, delRun...)

	var wg sync.WaitGroup
	for _, r := range run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(klog.NewContext(ctx, logger.WithName(r.name)))
		}()
	}
	factory.Start(ctx.Done())
	metaFactory.Start(ctx.Done())
	close(informersStarted)
	<-ctx.Done()
	// The controllers return once their queues are shut down. Closing the
	// connections then ends any request still in flight, so the informers,
	// which Shutdown waits for, cannot hang on one.
	wg.Wait()
	cl.close()
	factory.Shutdown()
	metaFactory.Shutdown()
	crdShutdown()
	return nil
}

// runnable is one controller of a term.
type runnable struct {
	name string
	run  func(ctx context.Context)
}

// certificateControllers are kube-controller-manager's CSR controllers, all
// acting as kube-system/certificate-controller as kube runs them: a signer
// for each built-in signer with a CA, the approver of kubelet client
// certificates (it asks SubjectAccessReviews whether the requestor may
// create certificatesigningrequests/nodeclient or /selfnodeclient), and the
// cleaner of old requests.
func (k *Kube) certificateControllers(ctx context.Context, cl *clients, factory informers.SharedInformerFactory) ([]runnable, error) {
	client, err := cl.forIdentity(ControllerIdentity(CertificateController), CertificateController)
	if err != nil {
		return nil, err
	}
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	var run []runnable
	signers := []struct {
		name  string
		files SignerFiles
		make  func(context.Context, kubernetes.Interface, certificatesinformers.CertificateSigningRequestInformer, string, string, time.Duration) (*signer.CSRSigningController, error)
	}{
		{"csrsigning-kube-apiserver-client", k.cfg.Signers.KubeAPIServerClient, signer.NewKubeAPIServerClientCSRSigningController},
		{"csrsigning-kubelet-client", k.cfg.Signers.KubeAPIServerClientKubelet, signer.NewKubeletClientCSRSigningController},
		{"csrsigning-kubelet-serving", k.cfg.Signers.KubeletServing, signer.NewKubeletServingCSRSigningController},
	}
	for _, sg := range signers {
		if sg.files.CertFile == "" || sg.files.KeyFile == "" {
			continue
		}
		c, err := sg.make(ctx, client, csrs, sg.files.CertFile, sg.files.KeyFile, k.cfg.SigningDuration)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sg.name, err)
		}
		run = append(run, runnable{sg.name, func(ctx context.Context) { c.Run(ctx, 5) }})
	}
	approve := approver.NewCSRApprovingController(ctx, client, csrs)
	run = append(run, runnable{"csrapproving", func(ctx context.Context) { approve.Run(ctx, 5) }})
	clean := cleaner.NewCSRCleanerController(client.CertificatesV1().CertificateSigningRequests(), csrs)
	run = append(run, runnable{"csrcleaner", func(ctx context.Context) { clean.Run(ctx, 1) }})
	return run, nil
}

// kube-controller-manager's defaults for the deletion controllers
// (--concurrent-gc-syncs, --concurrent-namespace-syncs,
// --namespace-sync-period, and the garbage collector's discovery period).
const (
	gcWorkers         = 20
	gcSyncPeriod      = 30 * time.Second
	namespaceWorkers  = 10
	namespaceResync   = 5 * time.Minute
	discoveryAttempts = 500 * time.Millisecond
)

// deletionControllers are kube-controller-manager's garbage collector and
// namespace controller, built as its startGarbageCollectorController and
// startNamespaceController build them: each with its own identity, a
// metadata client (PartialObjectMetadata lists, watches, patches and
// deletes) and discovery. objOrMeta hands the garbage collector's monitors
// the shared typed informers where they exist and metadata informers
// elsewhere; the monitors start once informersStarted is closed.
func (k *Kube) deletionControllers(ctx context.Context, cl *clients, factory informers.SharedInformerFactory, objOrMeta informerfactory.InformerFactory, informersStarted <-chan struct{}) ([]runnable, error) {
	// The garbage collector. Each deletion costs it two requests, so kube
	// doubles its QPS.
	gcCfg, err := cl.configFor(ControllerIdentity(GarbageCollector), GarbageCollector)
	if err != nil {
		return nil, err
	}
	gcCfg.QPS *= 2
	gcClient, err := kubernetes.NewForConfig(gcCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GarbageCollector, err)
	}
	gcMeta, err := metadata.NewForConfig(gcCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GarbageCollector, err)
	}
	// The RESTMapper reads discovery through its own cached client (kube's
	// "controller-discovery"); the collector's Sync polls discovery through
	// another one and resets the mapper when the resources change.
	mapperDiscovery, err := discovery.NewDiscoveryClientForConfig(gcCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GarbageCollector, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(mapperDiscovery))
	syncDiscovery, err := discovery.NewDiscoveryClientForConfig(gcCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GarbageCollector, err)
	}
	gc, err := garbagecollector.NewGarbageCollector(ctx, gcClient, gcMeta, mapper,
		garbagecollector.DefaultIgnoredResources(), objOrMeta, informersStarted)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GarbageCollector, err)
	}
	run := []runnable{
		{GarbageCollector, func(ctx context.Context) { gc.Run(ctx, gcWorkers, gcSyncPeriod) }},
		{GarbageCollector + "-sync", func(ctx context.Context) { gc.Sync(ctx, syncDiscovery, gcSyncPeriod) }},
	}

	// The namespace controller. It is chatty (discovery, then a list and a
	// deletecollection per resource), so kube lifts its rate limits.
	nsCfg, err := cl.configFor(ControllerIdentity(NamespaceController), NamespaceController)
	if err != nil {
		return nil, err
	}
	nsCfg.QPS *= 20
	nsCfg.Burst *= 100
	nsClient, err := kubernetes.NewForConfig(nsCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NamespaceController, err)
	}
	nsMeta, err := metadata.NewForConfig(nsCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NamespaceController, err)
	}
	discover, err := firstDiscovery(ctx, nsClient.Discovery().ServerPreferredNamespacedResources)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NamespaceController, err)
	}
	nsc := namespacecontroller.NewNamespaceController(ctx, nsClient, nsMeta, discover,
		factory.Core().V1().Namespaces(), namespaceResync, corev1.FinalizerKubernetes)
	run = append(run, runnable{NamespaceController, func(ctx context.Context) { nsc.Run(ctx, namespaceWorkers) }})
	return run, nil
}

// firstDiscovery returns discover with its first answer fetched now,
// retried until it names some resource or ctx ends. kube's namespace
// deleter calls discovery once when it is built and exits the process when
// that finds nothing; a term that cannot reach its own API yet must not
// take the node down, so the first answer is awaited here instead.
func firstDiscovery(ctx context.Context, discover func() ([]*metav1.APIResourceList, error)) (func() ([]*metav1.APIResourceList, error), error) {
	var (
		first    []*metav1.APIResourceList
		firstErr error
	)
	for {
		first, firstErr = discover()
		if len(first) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("discovery: %w (last error: %v)", ctx.Err(), firstErr)
		case <-time.After(discoveryAttempts):
		}
	}
	var once sync.Once
	return func() ([]*metav1.APIResourceList, error) {
		served := false
		once.Do(func() { served = true })
		if served {
			return first, firstErr
		}
		return discover()
	}, nil
}
