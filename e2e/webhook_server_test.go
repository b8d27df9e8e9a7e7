package e2e_test

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// webhookServer is a real HTTPS admission webhook in the test process.
// Each path is one behaviour:
//
//	/allow    allows
//	/deny     denies with the message "e2e says no"
//	/patch    allows with a JSON patch adding the label patched=yes (a
//	          delete without one)
//	/warn     allows with the warning "e2e warns"
//	/hang     answers nothing until the caller gives up (at most a minute)
//	/garbage  answers a body that is not an AdmissionReview
//	/huge     allows, with a status message of 16 MiB
//
// and two conversion webhooks for custom resources, whose v1 has
// spec.color where v2 has spec.colour:
//
//	/convert          converts
//	/convert-garbage  answers a body that is not a ConversionReview
//
// It records every review it is sent, whatever the path.
type webhookServer struct {
	srv   *httptest.Server
	caPEM []byte

	mu   sync.Mutex
	seen []seenReview
}

// seenReview is what the server was sent in one call.
type seenReview struct {
	Path, APIVersion      string
	Request               admissionv1.AdmissionRequest
	ObjectAPIVersion      string
	ObjectLabels          map[string]string
	ObjectName, Operation string
	// Credentials says what the caller presented: an Authorization
	// header, a client certificate.
	Credentials []string
}

func startWebhookServer(t testing.TB) *webhookServer {
	t.Helper()
	w := &webhookServer{}
	w.srv, w.caPEM = startTLSServer(t, http.HandlerFunc(w.serve))
	return w
}

// startTLSServer starts h as an HTTPS server on loopback, stopped when
// the test ends, and returns it with its CA certificate in PEM. It asks
// for a client certificate, never requires one, so that a caller that
// has one to present shows it (callerCredentials).
func startTLSServer(t testing.TB, h http.Handler) (*httptest.Server, []byte) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// callerCredentials says what credentials r's caller presented: an
// Authorization header, a client certificate.
func callerCredentials(r *http.Request) []string {
	var creds []string
	if r.Header.Get("Authorization") != "" {
		creds = append(creds, "Authorization header")
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		creds = append(creds, "client certificate "+r.TLS.PeerCertificates[0].Subject.String())
	}
	return creds
}

func (w *webhookServer) serve(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/convert") {
		w.convert(rw, r, body)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, "not an admission review", http.StatusBadRequest)
		return
	}
	var obj struct {
		APIVersion string            `json:"apiVersion"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	raw := review.Request.Object.Raw
	if len(raw) == 0 {
		raw = review.Request.OldObject.Raw
	}
	_ = json.Unmarshal(raw, &obj)
	creds := callerCredentials(r)
	w.mu.Lock()
	w.seen = append(w.seen, seenReview{Path: r.URL.Path, APIVersion: review.APIVersion, Request: *review.Request, ObjectAPIVersion: obj.APIVersion,
		ObjectLabels: obj.Metadata.Labels, ObjectName: review.Request.Name, Operation: string(review.Request.Operation), Credentials: creds})
	w.mu.Unlock()

	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	switch r.URL.Path {
	case "/deny":
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: "e2e says no"}
	case "/patch":
		if review.Request.Operation == admissionv1.Delete {
			break // nothing to patch: kube refuses a patch of a delete
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
		resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels/patched","value":"yes"}]`)
	case "/warn":
		resp.Warnings = []string{"e2e warns"}
	case "/hang":
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	case "/garbage":
		_, _ = io.WriteString(rw, "this is not an admission review")
		return
	case "/huge":
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"`+string(review.Request.UID)+`","allowed":true,"status":{"message":"`)
		chunk := strings.Repeat("x", 1<<20)
		for range 16 {
			if _, err := io.WriteString(rw, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(rw, `"}}}`)
		return
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(out)
}

// reviews returns the reviews sent to path for objects named name.
func (w *webhookServer) reviews(path, name string) []seenReview {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []seenReview
	for _, s := range w.seen {
		if s.Path == path && (name == "" || s.ObjectName == name) {
			out = append(out, s)
		}
	}
	return out
}

// kinds returns every kind the server was sent a review of.
func (w *webhookServer) kinds() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, s := range w.seen {
		out[s.Request.Kind.Group+"/"+s.Request.Kind.Kind] = true
	}
	return out
}

// credentials returns every credential any caller presented.
func (w *webhookServer) credentials() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.seen {
		out = append(out, s.Credentials...)
	}
	return out
}

// clientConfig is the client configuration of the server's path.
func (w *webhookServer) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	url := w.srv.URL + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.caPEM}
}

// convert serves the conversion paths, recording each call's credentials
// as a review of path with no request.
func (w *webhookServer) convert(rw http.ResponseWriter, r *http.Request, body []byte) {
	w.mu.Lock()
	w.seen = append(w.seen, seenReview{Path: r.URL.Path, Credentials: callerCredentials(r)})
	w.mu.Unlock()
	if r.URL.Path == "/convert-garbage" {
		_, _ = io.WriteString(rw, "this is not a conversion review")
		return
	}
	var review apiextensionsv1.ConversionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, "not a conversion review", http.StatusBadRequest)
		return
	}
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, o := range review.Request.Objects {
		var u map[string]any
		if err := json.Unmarshal(o.Raw, &u); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		spec, _ := u["spec"].(map[string]any)
		from, to := "colour", "color"
		if strings.HasSuffix(review.Request.DesiredAPIVersion, "/v2") {
			from, to = to, from
		}
		if v, ok := spec[from]; ok {
			delete(spec, from)
			spec[to] = v
		}
		u["apiVersion"] = review.Request.DesiredAPIVersion
		raw, _ := json.Marshal(u)
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: raw})
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(apiextensionsv1.ConversionReview{TypeMeta: review.TypeMeta, Response: resp})
}
