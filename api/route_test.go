package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestCheckRoute pins go-restful's refusals as kube-apiserver v1.33 passes
// them on (RouterJSR311.detectRoute, serviceErrorHandler).
func TestCheckRoute(t *testing.T) {
	const watchable = "application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
	const plain = "application/json, application/yaml, application/vnd.kubernetes.protobuf"
	tests := []struct {
		name                string
		method, verb        string
		contentType, accept string
		body                string
		noContentLength     bool
		code                int32
		message             string
	}{
		{name: "no Accept is */*", method: "GET", verb: "get"},
		{name: "a Table request is application/json to the router", method: "GET", verb: "list", accept: "application/json;as=Table;g=meta.k8s.io;v=v1"},
		{name: "one acceptable type among others", method: "GET", verb: "get", accept: "text/html, application/yaml;q=0.5"},
		{name: "*/* among others", method: "GET", verb: "get", accept: "text/html, */*;q=0.1"},
		{name: "type/* is not a wildcard to go-restful", method: "GET", verb: "get", accept: "application/*",
			code: 406, message: "406: Not Acceptable\n\nAvailable representations: " + plain},
		{name: "a list route lists the streaming types", method: "GET", verb: "list", accept: "text/html",
			code: 406, message: "406: Not Acceptable\n\nAvailable representations: " + watchable},
		{name: "a watch too", method: "GET", verb: "watch", accept: "text/html",
			code: 406, message: "406: Not Acceptable\n\nAvailable representations: " + watchable},
		{name: "a create with a body is 406", method: "POST", verb: "create", contentType: "application/json", accept: "text/html", body: "{}",
			code: 406, message: "406: Not Acceptable\n\nAvailable representations: " + plain},
		{name: "a create without Content-Length is 415", method: "POST", verb: "create", contentType: "application/json", accept: "text/html", body: "{}", noContentLength: true,
			code: 415, message: "415: Unsupported Media Type\n\nAvailable representations: " + plain},
		{name: "a create consumes anything (the handler decides)", method: "POST", verb: "create", contentType: "text/plain", body: "x"},
		{name: "a patch type", method: "PATCH", verb: "patch", contentType: "application/merge-patch+json; charset=utf-8", body: "{}"},
		{name: "a patch of another type with a body", method: "PATCH", verb: "patch", contentType: "application/json", body: "{}",
			code: 415, message: "415: Unsupported Media Type"},
		{name: "a patch without Content-Type is application/octet-stream", method: "PATCH", verb: "patch", body: "{}",
			code: 415, message: "415: Unsupported Media Type"},
		{name: "a patch of another type without a body leaves no route", method: "PATCH", verb: "patch", contentType: "application/json",
			code: 406, message: "406: Not Acceptable\n\nAvailable representations: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "/api/v1/namespaces/ns/configmaps", strings.NewReader(tc.body))
			if tc.body == "" {
				req.Header.Set("Content-Length", "0")
			} else if tc.noContentLength {
				req.ContentLength = -1
			} else {
				req.Header.Set("Content-Length", "1")
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			err := checkRoute(req, tc.verb)
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			st, ok := err.(apierrors.APIStatus)
			if !ok {
				t.Fatalf("got %v, want a Status %d", err, tc.code)
			}
			s := st.Status()
			if s.Code != tc.code || s.Message != tc.message {
				t.Fatalf("got %d %q, want %d %q", s.Code, s.Message, tc.code, tc.message)
			}
			if tc.code == http.StatusNotAcceptable && s.Reason != "NotAcceptable" || tc.code == http.StatusUnsupportedMediaType && s.Reason != "UnsupportedMediaType" {
				t.Fatalf("reason %q", s.Reason)
			}
		})
	}
}
