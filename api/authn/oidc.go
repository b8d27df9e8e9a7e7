package authn

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	restful "github.com/emicklei/go-restful/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/kubernetes/pkg/routes"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/registry"
)

// oidc serves kube's OIDC discovery documents for the current keys. kube
// renders them once per key change (NewOpenIDMetadataProvider); here they
// are rendered again whenever this node applies a key change.
type oidc struct {
	issuer, jwksURI, external string
	maxAge                    int
	keys                      *KeyStore

	mu      sync.Mutex
	builtAt *keySet
	handler http.Handler
}

// oidcPaths returns the discovery handlers, or none when the issuer is not
// an https URL without query or fragment: kube-apiserver then serves no
// discovery either (it logs and skips it).
func oidcPaths(cfg *Config, keys *KeyStore) map[string]http.Handler {
	if u, err := url.Parse(cfg.Issuer); err != nil || u.Scheme != "https" || u.RawQuery != "" || u.Fragment != "" {
		return nil
	}
	o := &oidc{issuer: cfg.Issuer, jwksURI: cfg.JWKSURI, external: cfg.ExternalAddress, keys: keys, maxAge: int(cfg.JWKSMaxAge / time.Second)}
	return map[string]http.Handler{serviceaccount.OpenIDConfigPath: o, serviceaccount.JWKSPath: o}
}

// ServeHTTP serves the documents of the keys this node has applied, once
// it is fresh or has caught up (KeyStore.SetFresh); a node that can do
// neither (cut off from the leader) answers 503 with Retry-After, as a
// resourceVersion=0 read there does, so that relying parties ask another
// node instead of caching a key set that may lack the signing key.
func (o *oidc) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if err := o.keys.caughtUp(req.Context()); err != nil {
		st := apierrors.NewServiceUnavailable("service account issuer discovery is not available: this apiserver has not caught up with the cluster's leader; retry against another server")
		st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		responsewriters.ErrorNegotiated(st, registry.Codecs, schema.GroupVersion{}, w, req)
		return
	}
	h, err := o.current()
	if err != nil {
		st := apierrors.NewServiceUnavailable(fmt.Sprintf("service account issuer discovery is not available: %v", err))
		responsewriters.ErrorNegotiated(st, registry.Codecs, schema.GroupVersion{}, w, req)
		return
	}
	h.ServeHTTP(w, req)
}

// current returns kube's discovery server for the keys this node has.
func (o *oidc) current() (http.Handler, error) {
	s, err := o.keys.keys()
	if err != nil {
		return nil, err
	}
	if s.current == nil {
		return nil, ErrNoSigningKey
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.builtAt == s {
		return o.handler, nil
	}
	var pub serviceaccount.PublicKeysGetter = s.public
	if o.maxAge > 0 {
		pub = maxAged{s.public, o.maxAge}
	}
	p, err := serviceaccount.NewOpenIDMetadataProvider(o.issuer, o.jwksURI, o.external, pub)
	if err != nil {
		return nil, err
	}
	c := restful.NewContainer()
	routes.NewOpenIDMetadataServer(p).Install(c)
	o.builtAt, o.handler = s, c
	return c, nil
}

// maxAged is a key getter whose documents may be cached maxAge seconds
// (kube's getters say 3600): relying parties such as kube-apiserver's JWT
// authenticator refetch the key set on an unknown key id only once that
// has passed, so it bounds how long they take to learn a promoted key.
type maxAged struct {
	serviceaccount.PublicKeysGetter
	maxAge int
}

func (m maxAged) GetCacheAgeMaxSeconds() int { return m.maxAge }
