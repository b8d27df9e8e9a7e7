package webhookclient

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
)

// TestLimit: an answer up to the limit is read whole; one byte more, with
// or without a Content-Length, fails the read with ErrResponseTooLarge.
func TestLimit(t *testing.T) {
	const max = 1000
	for _, c := range []struct {
		name    string
		size    int
		chunked bool
		wantErr error
	}{
		{"empty", 0, false, nil},
		{"at the limit", max, false, nil},
		{"at the limit, chunked", max, true, nil},
		{"over, announced", max + 1, false, ErrResponseTooLarge},
		{"over, chunked", max + 1, true, ErrResponseTooLarge},
		{"far over, chunked", 100 * max, true, ErrResponseTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !c.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(c.size))
				}
				_, _ = io.WriteString(w, strings.Repeat("x", c.size))
			}))
			defer srv.Close()
			resolver, err := webhookutil.NewDefaultAuthenticationInfoResolver("")
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Limit(max)(resolver).ClientConfigFor(strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			rt, err := rest.TransportFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if c.wantErr == nil && len(body) != c.size {
				t.Fatalf("read %d bytes of %d", len(body), c.size)
			}
			if err != nil && strings.Contains(err.Error(), "xxx") {
				t.Fatalf("the error quotes the answer: %v", err)
			}
		})
	}
}

// TestServices: no Service resolves; the error names it and the reason.
func TestServices(t *testing.T) {
	_, err := Services{}.ResolveEndpoint("ns", "hook", 443)
	if !errors.Is(err, ErrNoService) || err.Error() != "service ns/hook:443: "+NoServiceReference {
		t.Fatalf("ResolveEndpoint: %v", err)
	}
}
