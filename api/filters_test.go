package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/apis/apiserver"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	pluginlog "k8s.io/apiserver/plugin/pkg/audit/log"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
)

func testServer(t *testing.T) *Server {
	t.Helper()
	return newTestServer(t, nil, func(*Config) {})
}

// newTestServer is testServer serving resources, with mod applied to its
// config before the filter chain is built.
func newTestServer(t *testing.T, resources []*registry.Resource, mod func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{}}}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	mod(cfg)
	stor, err := storage.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, registry.New(stor, resources, nil))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decodeStatus(t *testing.T, rec *httptest.ResponseRecorder) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("body is not a Status: %v\n%s", err, rec.Body.String())
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
		t.Fatalf("not a failure Status: %+v", st)
	}
	return st
}

func TestRecoveryTurnsAHandlerPanicIntoA500Status(t *testing.T) {
	s := testServer(t)
	h := s.withRecovery(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("code = %d, want 500", rec.Code)
	}
	if st := decodeStatus(t, rec); st.Code != 500 || st.Reason != metav1.StatusReasonInternalError {
		t.Fatalf("status = %+v", st)
	}
}

func TestRecoveryLetsAbortHandlerThrough(t *testing.T) {
	s := testServer(t)
	h := s.withRecovery(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler to reach net/http", p)
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
}

func TestAuthentication(t *testing.T) {
	client := &x509.Certificate{Subject: pkix.Name{CommonName: "alice", Organization: []string{"team-a", "team-b"}}}
	withCert := func(r *http.Request) *http.Request {
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{client}}}
		return r
	}
	tests := []struct {
		name       string
		req        *http.Request
		wantCode   int
		wantUser   string
		wantGroups []string
	}{
		{"a verified client certificate names the user and groups",
			withCert(httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)), 200, "alice", []string{"team-a", "team-b", "system:authenticated"}},
		{"no credentials on a resource path is 401",
			httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil), 401, "", nil},
		{"no credentials on discovery is 401",
			httptest.NewRequest(http.MethodGet, "/apis", nil), 401, "", nil},
		{"health is public",
			httptest.NewRequest(http.MethodGet, "/readyz", nil), 200, "system:anonymous", []string{"system:unauthenticated"}},
		{"a single health check is public",
			httptest.NewRequest(http.MethodGet, "/livez/ping", nil), 200, "system:anonymous", []string{"system:unauthenticated"}},
		{"version is public",
			httptest.NewRequest(http.MethodGet, "/version", nil), 200, "system:anonymous", []string{"system:unauthenticated"}},
		{"a path that only starts like a public one is not public",
			httptest.NewRequest(http.MethodGet, "/readyzz", nil), 401, "", nil},
	}
	s := testServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotUser string
			var gotGroups []string
			h := authenticate(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u, _ := genericapirequest.UserFrom(r.Context())
				gotUser, gotGroups = u.GetName(), u.GetGroups()
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req)
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d", rec.Code, tt.wantCode)
			}
			if tt.wantCode == 401 {
				if st := decodeStatus(t, rec); st.Reason != metav1.StatusReasonUnauthorized || st.Message != "Unauthorized" {
					t.Fatalf("status = %+v", st)
				}
				return
			}
			if gotUser != tt.wantUser || len(gotGroups) != len(tt.wantGroups) {
				t.Fatalf("user = %q %v, want %q %v", gotUser, gotGroups, tt.wantUser, tt.wantGroups)
			}
			for i := range gotGroups {
				if gotGroups[i] != tt.wantGroups[i] {
					t.Fatalf("groups = %v, want %v", gotGroups, tt.wantGroups)
				}
			}
		})
	}
}

// TestTokenNotVerifiableIs503: a node that cannot verify this cluster's
// tokens now (authn.ErrNotFresh, however deep kube's union and cache wrap
// it) answers the request 503 with Retry-After, not a 401 that would tell
// the client its credential is bad; any other failure is still 401.
func TestTokenNotVerifiableIs503(t *testing.T) {
	notFresh := utilerrors.NewAggregate([]error{errors.New("token issuer is invalid"), authn.ErrNotFresh})
	tests := []struct {
		name     string
		err      error
		audited  bool
		wantCode int
	}{
		{"not fresh, as kube's token union wraps it", notFresh, false, http.StatusServiceUnavailable},
		{"not fresh, audited as a failed authentication", notFresh, true, http.StatusServiceUnavailable},
		{"another failure", utilerrors.NewAggregate([]error{errors.New("invalid signature")}), false, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			s := newTestServer(t, nil, func(c *Config) {
				c.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) { return nil, false, tt.err })
				if tt.audited {
					c.AuditSink = pluginlog.NewBackend(&log, pluginlog.FormatJson, auditv1.SchemeGroupVersion)
					c.AuditPolicy = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelRequestResponse, nil)
				}
			})
			reached := false
			h := authenticate(s, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
			if tt.audited {
				h = s.Handler() // with the audit filters
			}
			req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces", nil)
			req.Header.Set("Authorization", "Bearer some-token")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode || reached {
				t.Fatalf("code = %d (handler reached: %v), want %d: %s", rec.Code, reached, tt.wantCode, rec.Body)
			}
			if tt.wantCode == http.StatusServiceUnavailable {
				if st := decodeStatus(t, rec); st.Reason != metav1.StatusReasonServiceUnavailable || rec.Header().Get("Retry-After") != "1" || strings.Contains(rec.Body.String(), "some-token") {
					t.Fatalf("status = %+v, Retry-After %q", st, rec.Header().Get("Retry-After"))
				}
			}
			if tt.audited && (!strings.Contains(log.String(), `"code":503`) || strings.Contains(log.String(), "some-token")) {
				t.Fatalf("the audit log of the refusal: %s", log.String())
			}
		})
	}
}

// TestAnonymousConditions: with kube's anonymous authenticator limited to
// the discovery paths, exactly those paths are anonymous; a path that
// only decodes, cleans or trims to one of them, and a bad token sent to
// one, get 401. Other methods on the paths are anonymous too (kube's
// conditions name paths only): RBAC refuses them.
func TestAnonymousConditions(t *testing.T) {
	s := newTestServer(t, nil, func(c *Config) {
		c.Anonymous = anonymous.NewAuthenticator([]apiserver.AnonymousAuthCondition{{Path: "/.well-known/openid-configuration"}, {Path: "/openid/v1/jwks"}})
		c.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return nil, false, errors.New("invalid bearer token")
		})
	})
	tests := []struct {
		method, target string
		header         string
		want           int
	}{
		{"GET", "/openid/v1/jwks", "", 200},
		{"GET", "/.well-known/openid-configuration", "", 200},
		{"GET", "/openid/v1/jwks?x=1&watch=true", "", 200},
		{"POST", "/openid/v1/jwks", "", 200},
		{"DELETE", "/.well-known/openid-configuration", "", 200},
		{"GET", "/openid/v1/jwks", "Bearer not-a-token", 401},
		{"GET", "/openid/v1/jwks", "Basic YTpi", 401},
		{"GET", "/openid/v1/jwks", "two, the first empty", 401},
		{"GET", "/openid/v1/jwks/", "", 401},
		{"GET", "/openid/v1/jwks/..", "", 401},
		{"GET", "/openid/v1/../v1/jwks", "", 401},
		{"GET", "/openid/v1/./jwks", "", 401},
		{"GET", "//openid/v1/jwks", "", 401},
		{"GET", "/openid/v1%2Fjwks", "", 401},
		{"GET", "/openid/v1/%6Awks", "", 401},
		{"GET", "/openid%2Fv1%2Fjwks", "", 401},
		{"GET", "/OPENID/V1/JWKS", "", 401},
		{"GET", "/openid/v1/jwks%00", "", 401},
		{"GET", "/openid/v1/jwksx", "", 401},
		{"GET", "/openid/v1", "", 401},
		{"GET", "/api/v1/namespaces", "", 401},
		{"GET", "/apis", "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target+" "+tt.header, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, nil)
			switch tt.header {
			case "":
			case "two, the first empty":
				req.Header.Add("Authorization", "")
				req.Header.Add("Authorization", "Bearer x")
			default:
				req.Header.Set("Authorization", tt.header)
			}
			var got string
			rec := httptest.NewRecorder()
			authenticate(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u, _ := genericapirequest.UserFrom(r.Context())
				got = u.GetName()
			})).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("code = %d, want %d", rec.Code, tt.want)
			}
			if tt.want == 200 && got != user.Anonymous {
				t.Fatalf("user = %q, want %s", got, user.Anonymous)
			}
		})
	}
}

func TestProfilingIsForSystemMastersOnly(t *testing.T) {
	s := testServer(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "bob"}}}}}
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code = %d for a user outside system:masters, want 403", rec.Code)
	}
}

// TestRemoteIdentityHeadersAreTrustedOnlyFromNodes: the headers are
// believed from a node certificate of the node CA only. The same subject
// from the cluster CA (what an approved CSR could produce) stays itself.
func TestRemoteIdentityHeadersAreTrustedOnlyFromNodes(t *testing.T) {
	clusterCA, err := certs.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodeCA, err := certs.LoadOrCreateNodeCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	chains := func(ca *certs.CA, r certs.Request) [][]*x509.Certificate {
		certPEM, _, err := ca.Issue(r)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(certPEM)
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(clusterCA.Cert)
		pool.AddCert(nodeCA.Cert)
		cs, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	spoof := func(chains [][]*x509.Certificate) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", nil)
		r.TLS = &tls.ConnectionState{VerifiedChains: chains}
		r.Header.Set("X-Remote-User", "mallory")
		r.Header.Add("X-Remote-Group", "system:masters")
		return r
	}
	// component adds the header a node forwarding its own component's
	// write sets.
	component := func(r *http.Request) *http.Request {
		r.Header.Set(headerForwardedCaller, forwardedComponent)
		return r
	}
	plain := func(chains [][]*x509.Certificate) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/configmaps?watch=true", nil)
		r.TLS = &tls.ConnectionState{VerifiedChains: chains}
		return r
	}
	tests := []struct {
		name     string
		req      *http.Request
		wantUser string
		wantCred credential
	}{
		{"a node forwarding a write is trusted for the caller's identity", spoof(chains(nodeCA, certs.NodeRequest("n2"))), "mallory", credentialForwarded},
		{"a node forwarding its component's write vouches for it", component(spoof(chains(nodeCA, certs.NodeRequest("n2")))), "mallory", credentialComponent},
		{"a client certificate cannot claim to be a component", component(plain(chains(clusterCA, certs.Request{CommonName: "system:kube-controller-manager", Client: true}))), "system:kube-controller-manager", credentialCertificate},
		{"a node subject from the cluster CA cannot claim another identity", spoof(chains(clusterCA, certs.NodeRequest("n2"))), certs.NodeUserPrefix + "n2", credentialCertificate},
		{"a client certificate cannot claim another identity", spoof(chains(clusterCA, certs.Request{CommonName: "admin", Organization: []string{"system:masters"}, Client: true})), "admin", credentialCertificate},
		{"a node's own certificate is a node's credential", plain(chains(nodeCA, certs.NodeRequest("n2"))), certs.NodeUserPrefix + "n2", credentialNode},
		{"a node subject from the cluster CA is only a certificate", plain(chains(clusterCA, certs.NodeRequest("n2"))), certs.NodeUserPrefix + "n2", credentialCertificate},
	}
	s := testServer(t)
	s.cfg.Nodes = certs.NewNodeVerifier(nodeCA)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			var who caller
			h := authenticate(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u, _ := genericapirequest.UserFrom(r.Context())
				got = u.GetName()
				who, _ = callerFrom(r.Context())
			}))
			h.ServeHTTP(httptest.NewRecorder(), tt.req)
			if got != tt.wantUser || who.name() != tt.wantUser || who.cred != tt.wantCred {
				t.Fatalf("user = %q, caller %q by credential %d; want %q by %d", got, who.name(), who.cred, tt.wantUser, tt.wantCred)
			}
		})
	}

	// A forwarded request says its version (X-Trustplane-Forwarded-By);
	// one this node does not read is refused before its identity headers
	// are believed, with both versions named.
	for _, tt := range []struct {
		value string
		code  int
	}{
		{"1", http.StatusOK},
		{"2", http.StatusServiceUnavailable},
		{"0", http.StatusServiceUnavailable},
		{"v1", http.StatusServiceUnavailable},
		{strings.Repeat("9", 40), http.StatusServiceUnavailable},
	} {
		t.Run("forwarded-request version "+tt.value[:min(len(tt.value), 4)], func(t *testing.T) {
			req := spoof(chains(nodeCA, certs.NodeRequest("n2")))
			req.Header.Set(headerForwardedBy, tt.value)
			called := false
			rec := httptest.NewRecorder()
			authenticate(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called = true })).ServeHTTP(rec, req)
			if rec.Code != tt.code || called != (tt.code == http.StatusOK) {
				t.Fatalf("code %d (handler called: %v) %s, want %d", rec.Code, called, rec.Body, tt.code)
			}
			if tt.code != http.StatusOK && (!strings.Contains(rec.Body.String(), "reads up to version 1") || strings.Contains(rec.Body.String(), "9999")) {
				t.Fatalf("the refusal %s does not name this node's version, or quotes a long value", rec.Body)
			}
		})
	}
}

// authenticate is the two authentication filters with nothing between
// them (the chain puts max in flight there).
func authenticate(s *Server, next http.Handler) http.Handler {
	return s.withTLSAuthentication(s.withTokenAuthentication(next))
}

func TestIdentityHeadersRoundTrip(t *testing.T) {
	in := &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"a", "system:authenticated"},
		Extra: map[string][]string{"scopes.example.com/x": {"1", "2"}}}
	h := http.Header{}
	h.Set("X-Remote-User", "stale")
	h.Set("Authorization", "Bearer secret")
	h.Set(headerForwardedCaller, forwardedComponent)
	setIdentityHeaders(h, in)
	if h.Get("Authorization") != "" {
		t.Fatal("credentials of the caller were forwarded")
	}
	if h.Get(headerForwardedCaller) != "" {
		t.Fatal("a client's claim to be a component was forwarded")
	}
	out, ok := identityFromHeaders(h)
	if !ok {
		t.Fatal("no identity read back")
	}
	if out.GetName() != "alice" || out.GetUID() != "u-1" || len(out.GetGroups()) != 2 {
		t.Fatalf("identity = %+v", out)
	}
	if got := out.GetExtra()["scopes.example.com/x"]; len(got) != 2 || got[0] != "1" {
		t.Fatalf("extra = %v", out.GetExtra())
	}
}

// TestFromComponent: a component is known by its credential, and only
// while it acts as itself.
func TestFromComponent(t *testing.T) {
	kcm := &user.DefaultInfo{Name: user.KubeControllerManager}
	impersonated := func(ctx context.Context) context.Context {
		return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: user.KubeControllerManager})
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"a component's certificate", withCaller(context.Background(), kcm, credentialComponent), true},
		{"a component impersonating, even its own name", impersonated(withCaller(context.Background(), kcm, credentialComponent)), false},
		{"the name on a client certificate", withCaller(context.Background(), kcm, credentialCertificate), false},
		{"the name forwarded without the node's word", withCaller(context.Background(), kcm, credentialForwarded), false},
		{"a peer node's own certificate", withCaller(context.Background(), kcm, credentialNode), false},
		{"the name alone", genericapirequest.WithUser(context.Background(), kcm), false},
		{"nobody", context.Background(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromComponent(tc.ctx); got != tc.want {
				t.Fatalf("FromComponent = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOnlyResourceWritesAreForwarded(t *testing.T) {
	tests := []struct {
		verb     string
		resource bool
		want     bool
	}{
		{"create", true, true}, {"update", true, true}, {"patch", true, true},
		{"delete", true, true}, {"deletecollection", true, true},
		{"get", true, false}, {"list", true, false}, {"watch", true, false},
		{"post", false, false},
	}
	for _, tt := range tests {
		info := &genericapirequest.RequestInfo{IsResourceRequest: tt.resource, Verb: tt.verb}
		if got := isWrite(info); got != tt.want {
			t.Errorf("isWrite(%s, resource=%v) = %v, want %v", tt.verb, tt.resource, got, tt.want)
		}
	}
}
