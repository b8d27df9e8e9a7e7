package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	pluginlog "k8s.io/apiserver/plugin/pkg/audit/log"

	admissionhook "github.com/trustplane/trustplane/api/admission"
	"github.com/trustplane/trustplane/api/auditlog"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
)

// auditedServer is a server whose audit log, kube's JSON log backend at
// RequestResponse for everything, is written to the returned buffer.
func auditedServer(t *testing.T, nodes NodeIdentifier) (*Server, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	cfg := DefaultConfig()
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{{}}}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Nodes = nodes
	cfg.AuditSink = pluginlog.NewBackend(&buf, pluginlog.FormatJson, auditv1.SchemeGroupVersion)
	cfg.AuditPolicy = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelRequestResponse, nil)
	stor, err := storage.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, registry.New(stor, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	return s, &buf
}

// TestAuditRecordsARequestOnceOnTheNodeItsClientTalksTo: a request is
// recorded by the node that serves its client, under the Audit-ID it
// answers with; a request another node forwarded is not recorded again,
// and only a node certificate can make a request count as forwarded.
func TestAuditRecordsARequestOnceOnTheNodeItsClientTalksTo(t *testing.T) {
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
	request := func(chains [][]*x509.Certificate, forwarded bool) *http.Request {
		path := "/version"
		if chains == nil {
			path = "/apis" // not public: no credential is a 401
		}
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if chains != nil {
			r.TLS = &tls.ConnectionState{VerifiedChains: chains}
		}
		if forwarded {
			r.Header.Set(headerForwardedBy, "1")
			r.Header.Set(headerRemoteUser, "alice")
		}
		r.Header.Set("Authorization", "Bearer never-logged")
		return r
	}
	admin := chains(clusterCA, certs.Request{CommonName: "admin", Organization: []string{"system:masters"}, Client: true})
	cases := []struct {
		name   string
		req    *http.Request
		stages []auditinternal.Stage
		user   string
		code   int32
	}{
		{"a client's request is recorded at its stages", request(admin, false),
			[]auditinternal.Stage{auditinternal.StageRequestReceived, auditinternal.StageResponseComplete}, "admin", 200},
		{"a request a node forwarded is not recorded again", request(chains(nodeCA, certs.NodeRequest("n2")), true), nil, "", 0},
		{"a client cannot make its request count as forwarded", request(admin, true),
			[]auditinternal.Stage{auditinternal.StageRequestReceived, auditinternal.StageResponseComplete}, "admin", 200},
		{"a failed authentication is recorded when the response starts", request(nil, false),
			[]auditinternal.Stage{auditinternal.StageResponseStarted}, "", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, buf := auditedServer(t, certs.NewNodeVerifier(nodeCA))
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, c.req)
			if bytes.Contains(buf.Bytes(), []byte("never-logged")) {
				t.Fatal("the bearer token is in the audit log")
			}
			var stages []auditinternal.Stage
			sc := bufio.NewScanner(buf)
			for sc.Scan() {
				var ev auditv1.Event
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					t.Fatal(err)
				}
				stages = append(stages, auditinternal.Stage(ev.Stage))
				if ev.User.Username != c.user || ev.ResponseStatus == nil && ev.Stage != auditv1.StageRequestReceived ||
					ev.ResponseStatus != nil && ev.ResponseStatus.Code != c.code {
					t.Fatalf("event of user %q status %+v, want %q and %d", ev.User.Username, ev.ResponseStatus, c.user, c.code)
				}
				if got := rec.Header().Get("Audit-Id"); string(ev.AuditID) != got {
					t.Fatalf("event of audit ID %s, answered %s", ev.AuditID, got)
				}
			}
			if len(stages) != len(c.stages) {
				t.Fatalf("stages %v, want %v", stages, c.stages)
			}
			for i := range stages {
				if stages[i] != c.stages[i] {
					t.Fatalf("stages %v, want %v", stages, c.stages)
				}
			}
			if c.stages == nil && rec.Header().Get("Audit-Id") != "" {
				t.Fatal("a forwarded request was answered with an Audit-ID of its own")
			}
		})
	}
}

// leakyPolicy is a validating admission plugin that does what a
// ValidatingAdmissionPolicy with auditAnnotations and a messageExpression
// over object.data can do: it annotates the request with, and denies it
// with a message quoting, the object's data.
type leakyPolicy struct{}

func (leakyPolicy) Handles(admission.Operation) bool { return true }

func (leakyPolicy) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("object %T", a.GetObject())
	}
	data := fmt.Sprint(u.Object["data"])
	if err := a.AddAnnotation("leaky/data", data); err != nil {
		return err
	}
	return admission.NewForbidden(a, fmt.Errorf("ValidatingAdmissionPolicy 'leaky' denied request: %s", data))
}

type leakyAdmission struct{}

func (leakyAdmission) For(schema.GroupVersionResource, schema.GroupVersionKind) []registry.AdmitFunc {
	return nil
}

// ForValidate guards Secrets and ConfigMaps.
func (leakyAdmission) ForValidate(gvr schema.GroupVersionResource, kind schema.GroupVersionKind) []registry.ValidateFunc {
	if gvr.Group != "" || gvr.Resource != "secrets" && gvr.Resource != "configmaps" {
		return nil
	}
	return []registry.ValidateFunc{admissionhook.HookValidate(admission.NewObjectInterfacesFromScheme(registry.Scheme), gvr, kind, admission.WithAudit(leakyPolicy{}))}
}

// TestAuditKeepsPolicyTextOfCredentialsOut: an admission policy that quotes
// a Secret's data in its audit annotation and its denial message leaves
// none of it in the audit log, while the client still gets the message,
// as kube's clients do; the same policy on a ConfigMap is recorded as kube
// records it (which shows the test sees what a policy writes).
func TestAuditKeepsPolicyTextOfCredentialsOut(t *testing.T) {
	var buf bytes.Buffer
	s := newRegistryServer(t, leakyAdmission{}, func(cfg *Config) {
		cfg.AuditSink = pluginlog.NewBackend(&buf, pluginlog.FormatJson, auditv1.SchemeGroupVersion)
		cfg.AuditPolicy = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelRequestResponse, nil)
	})
	c := metricsClient{t: t, s: s}
	const secretValue = "hunter2-in-the-secret"
	tests := []struct {
		name, target, body string
		inLog              bool
	}{
		{"a Secret's data stays out of the audit log", "/api/v1/namespaces/default/secrets",
			`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"password":"` + secretValue + `"}}`, false},
		{"a ConfigMap's data is recorded as kube records it", "/api/v1/namespaces/default/configmaps",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"password":"` + secretValue + `"}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf.Reset()
			rec := c.do(http.MethodPost, tt.target, "application/json", tt.body, "system:masters")
			if rec.Code != http.StatusForbidden {
				t.Fatalf("create: %d %s", rec.Code, rec.Body)
			}
			// The data as the policy sees it: the Secret's bytes are
			// base64 in the object, the ConfigMap's plain.
			quoted := []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue))}
			if !bytes.Contains(rec.Body.Bytes(), []byte(quoted[0])) && !bytes.Contains(rec.Body.Bytes(), []byte(quoted[1])) {
				t.Fatalf("the client did not get the policy's message: %s", rec.Body)
			}
			var complete *auditv1.Event
			sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
			for sc.Scan() {
				var ev auditv1.Event
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
					t.Fatal(err)
				}
				if ev.Stage == auditv1.StageResponseComplete {
					complete = &ev
				}
			}
			if complete == nil || complete.ResponseStatus == nil || complete.ResponseStatus.Code != http.StatusForbidden {
				t.Fatalf("no ResponseComplete event with the 403: %s", buf.String())
			}
			inLog := false
			for _, q := range quoted {
				inLog = inLog || bytes.Contains(buf.Bytes(), []byte(q))
			}
			if inLog != tt.inLog {
				t.Fatalf("the data is in the audit log: %v, want %v:\n%s", inLog, tt.inLog, buf.String())
			}
			if !tt.inLog {
				if complete.ResponseStatus.Message != auditlog.WithheldMessage || complete.ResponseStatus.Reason != metav1.StatusReasonForbidden {
					t.Fatalf("recorded status %+v", complete.ResponseStatus)
				}
				if _, ok := complete.Annotations["leaky/data"]; ok {
					t.Fatal("the policy's annotation was recorded")
				}
			}
		})
	}
}

// TestAuditOffInstallsNothing: without a sink the chain is the chain
// without auditing, a response carries no Audit-ID, and what the handlers
// call per request allocates nothing.
func TestAuditOffInstallsNothing(t *testing.T) {
	s := testServer(t)
	if s.auditing || s.failedAuthn != nil {
		t.Fatal("auditing is on without a sink")
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for name, f := range map[string]func(http.Handler) http.Handler{"withAudit": s.withAudit, "withAuditInit": s.withAuditInit} {
		if got := f(h); reflect.ValueOf(got).Pointer() != reflect.ValueOf(h).Pointer() {
			t.Fatalf("%s wraps the handler with auditing off", name)
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/version", nil))
	if rec.Header().Get("Audit-Id") != "" {
		t.Fatal("an Audit-ID without auditing")
	}
	// What the handlers call per request costs no allocation when off.
	req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/a/configmaps", nil)
	obj := &metav1.Status{}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	body := []byte(`{"kind":"ConfigMap"}`)
	resp := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody}
	if n := testing.AllocsPerRun(100, func() {
		s.auditRequest(req, obj, gvr.GroupVersion(), gvr, "")
		s.auditPatch(req, body)
		s.auditResponse(req, obj, gvr.GroupVersion())
		s.auditForwardedRequest(req, body)
		s.auditForwardedResponse(req, resp)
		_ = s.auditsResponseBody(req)
	}); n != 0 {
		t.Fatalf("%v allocations per request with auditing off, want 0", n)
	}
}

// TestForwardedAnnotationsHeader: the follower adds the annotations a
// leader sends back to its own event, ignores a header that is not a JSON
// object of strings, and never passes the header on to its client.
func TestForwardedAnnotationsHeader(t *testing.T) {
	s, _ := auditedServer(t, nil)
	for _, c := range []struct {
		header string
		want   map[string]string
	}{
		{`{"p/k":"v"}`, map[string]string{"p/k": "v"}},
		{`not json`, nil},
		{`{"p/k":1}`, nil},
		{`["p/k"]`, nil},
		{``, nil},
	} {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/a/configmaps", nil)
		ctx := audit.WithAuditContext(req.Context())
		audit.AuditContextFrom(ctx).RequestAuditConfig.Level = auditinternal.LevelMetadata
		req = req.WithContext(ctx)
		resp := &http.Response{Header: http.Header{}}
		if c.header != "" {
			resp.Header.Set(headerAuditAnnotations, c.header)
		}
		s.auditForwardedAnnotations(req, resp)
		if v := resp.Header.Get(headerAuditAnnotations); v != "" {
			t.Errorf("%q: the header stays in the client's answer", c.header)
		}
		if got := audit.AuditEventFrom(ctx).Annotations; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: annotations %v, want %v", c.header, got, c.want)
		}
	}
}
